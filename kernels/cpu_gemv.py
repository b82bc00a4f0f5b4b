"""Skinny CPU matmul for decode: y = x @ w.T for 1..8 rows, fp32 or bf16 weights.

fp32 weights: fp32 products and sums. bf16 weights: x rounded to bf16 (nearest even), exact
products, fp32 sums (AVX512-BF16 dot products where the CPU has them); y is always fp32.

The kernel (csrc/cpu_gemv.cpp) is compiled on first use with the host C++ compiler
(-O3 -march=native -fopenmp) into the cache dir, keyed by source, flags and CPU flags so a
shared home never hands one machine another's binary, and called through ctypes. No compiler,
a failed build or a non-x86/ARM oddity: `cpu_gemv_available()` is False and the engine keeps
oneDNN. Why it exists, measured on the 2-core Zen 5 dev machine: see benchmarks/llm_engine.py
and llm_engine/linear.py.
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
from pathlib import Path

import torch

from parley.assets import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "cpu_gemv.cpp"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
MAX_ROWS = 8


class GemvBuildError(RuntimeError):
    retryable = False


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def build(out_dir: Path | None = None) -> Path:
    """Compile the kernel (or reuse the cached build); -> the shared library's path."""
    cxx = _compiler()
    if cxx is None:
        raise GemvBuildError("no C++ compiler (g++/c++/clang++ or $CXX) on PATH")
    src = SOURCE.read_bytes()
    key = hashlib.sha256(src + " ".join((cxx, *FLAGS, platform.machine(), _cpu_flags())).encode())
    out_dir = out_dir or cache_dir() / "kernels"
    lib = out_dir / f"cpu_gemv-{key.hexdigest()[:16]}.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)  # atomic publish: parallel builders race safely
    os.close(fd)
    try:
        proc = subprocess.run([cxx, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise GemvBuildError(f"{cxx} failed on {SOURCE.name}: {proc.stderr.strip()[-800:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


@functools.cache
def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(str(build()))
    except (GemvBuildError, OSError) as e:
        log.warning("CPU gemv kernel unavailable, using oneDNN: %s", e)
        return None
    args = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    for fn in (lib.parley_gemv_f32, lib.parley_gemv_bf16):
        fn.argtypes, fn.restype = args, None
    return lib


def cpu_gemv_available() -> bool:
    return _library() is not None


def cpu_gemv(
    x: torch.Tensor,  # [M, K] fp32, 1 <= M <= 8
    w: torch.Tensor,  # [N, K] fp32 or bf16, contiguous
) -> torch.Tensor:  # [M, N] fp32
    if x.device.type != "cpu" or w.device.type != "cpu":
        raise ValueError("cpu_gemv takes CPU tensors")
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"cpu_gemv: x [M, K] and w [N, K] expected, got {tuple(x.shape)} and {tuple(w.shape)}")
    if not 1 <= x.shape[0] <= MAX_ROWS:
        raise ValueError(f"cpu_gemv takes 1..{MAX_ROWS} rows, got {x.shape[0]}")
    if x.dtype != torch.float32 or w.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"cpu_gemv: x fp32 and w fp32/bf16 expected, got {x.dtype} and {w.dtype}")
    if not w.is_contiguous():
        raise ValueError("cpu_gemv: w must be contiguous")
    lib = _library()
    if lib is None:
        raise GemvBuildError("the CPU gemv kernel could not be built (see the log)")
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=torch.float32)
    fn = lib.parley_gemv_f32 if w.dtype == torch.float32 else lib.parley_gemv_bf16
    fn(x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, torch.get_num_threads())
    return y


def cpu_gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    """The kernel's arithmetic in float64: bf16 weights meet x rounded to bf16."""
    xr = x.to(torch.bfloat16) if w.dtype == torch.bfloat16 else x
    return (xr.double() @ w.double().t()).float()
