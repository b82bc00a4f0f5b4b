"""Our C++ CPU kernels (kernels/csrc/*.cpp): compiled on first use with the host compiler
(-O3 -march=native -fopenmp) into the cache dir and loaded with ctypes.

A build is keyed by its source, the flags and the CPU's flags, so a shared home never hands
one machine another's binary. No compiler or a failed build: `library()` returns None (logged
once) and callers keep their torch paths.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from parley.assets import cache_dir

log = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")


_budget = threading.local()  # this thread's thread_budget(), if it is inside one


def threads() -> int:
    """Threads for the kernel calls of the calling thread: `thread_budget`'s count inside one,
    else torch's intra-op setting (an engine's `num_threads`)."""
    n = getattr(_budget, "threads", None)
    if n is not None:
        return n
    import torch

    return torch.get_num_threads()


@contextmanager
def thread_budget(n: int) -> Iterator[None]:
    """The kernels called on this thread, and only on it, use `n` threads inside the block
    (torch's own setting and other threads' kernels are left as they are)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"thread_budget needs an int >= 1, got {n!r}")
    before = getattr(_budget, "threads", None)
    _budget.threads = n
    try:
        yield
    finally:
        _budget.threads = before


class NativeBuildError(RuntimeError):
    retryable = False


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def cpu_flags() -> set[str]:
    """The host CPU's feature flags (empty where /proc/cpuinfo lists none)."""
    line = _cpu_flags()
    return set(line.split(":", 1)[1].split()) if ":" in line else set()


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def build(source: Path, out_dir: Path | None = None) -> Path:
    """Compile `source` (or reuse the cached build); -> the shared library's path."""
    cxx = _compiler()
    if cxx is None:
        raise NativeBuildError("no C++ compiler (g++/c++/clang++ or $CXX) on PATH")
    # every source and header beside it counts: a source may #include the others
    srcs = b"".join(p.read_bytes() for p in sorted(source.parent.iterdir())
                    if p.suffix in (".cpp", ".h") and p != source)
    key = hashlib.sha256(source.read_bytes() + srcs + " ".join((cxx, *FLAGS, platform.machine(), _cpu_flags())).encode())
    out_dir = out_dir or cache_dir() / "kernels"
    lib = out_dir / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)  # atomic publish: parallel builders race safely
    os.close(fd)
    try:
        proc = subprocess.run([cxx, *FLAGS, str(source), "-o", tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise NativeBuildError(f"{cxx} failed on {source.name}: {proc.stderr.strip()[-800:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


P, I64, I32, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


@functools.cache
def library(name: str) -> ctypes.CDLL | None:
    """The loaded csrc/<name>.cpp, or None when it cannot be built here."""
    try:
        return ctypes.CDLL(str(build(CSRC / f"{name}.cpp")))
    except (NativeBuildError, OSError) as e:
        log.warning("CPU kernels %s unavailable, using torch ops: %s", name, e)
        return None


def bind(lib: ctypes.CDLL, fn: str, *argtypes) -> ctypes._CFuncPtr:
    f = getattr(lib, fn)
    f.argtypes, f.restype = list(argtypes), None
    return f
