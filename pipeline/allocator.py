"""The memory allocator a `parley` process runs on.

A voice session's threads (STT, hearing, engine, TTS, livekit's executor) each allocate and
free buffers of changing sizes. glibc malloc gives each thread an arena and keeps what they
free: over the first 9 turns of a real session the bytes in use stayed flat (852 MB +- 1)
while the arenas grew 51 MB and resident memory 76 MB, with `malloc_trim` after every turn.
jemalloc returns freed pages to the system after `dirty_decay_ms`: side by side over 50
turns, resident memory grew 244 MB on glibc and stayed within 10 MB on jemalloc until one
jump that was Piper's arena, tts/piper_voice.py (benchmarks/results/*-soak-allocator.json).

LD_PRELOAD only works from a process's start, so the `parley` command re-executes itself
once under jemalloc when the library is installed (Debian: libjemalloc2, which
scripts/setup.sh installs). `PARLEY_ALLOCATOR=system` keeps glibc's. A program that builds
sessions itself (pipeline.session) chooses its own allocator: nothing here runs on import.
The same goes for `freeze_loaded_objects`, which the `parley` commands call once their models
have loaded.
"""

from __future__ import annotations

import ctypes.util
import functools
import gc
import os
import re
import sys
from collections.abc import Mapping

from parley.errors import ParleyError

# freed pages go back to the system within a second, from jemalloc's own thread
MALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000"
CHOICES = ("jemalloc", "system")


@functools.cache
def allocator_in_use() -> str:
    """"jemalloc" when this process has it loaded, else "system" (glibc malloc). Read once: a
    process's malloc is fixed at its start (LD_PRELOAD), and the soak asks after every turn."""
    try:
        with open("/proc/self/maps") as f:
            return "jemalloc" if "libjemalloc" in f.read() else "system"
    except OSError:  # no procfs (not Linux): whatever the platform's malloc is
        return "system"


def jemalloc_env(environ: Mapping[str, str], library: str | None) -> dict[str, str] | None:
    """The environment to re-execute under jemalloc, or None to stay: PARLEY_ALLOCATOR=system,
    jemalloc already preloaded (by the user, or by the re-execution itself), or no library."""
    choice = environ.get("PARLEY_ALLOCATOR", "jemalloc")
    if choice not in CHOICES:
        raise ParleyError(f"PARLEY_ALLOCATOR must be one of {', '.join(CHOICES)}, got {choice!r}")
    preload = environ.get("LD_PRELOAD", "")
    if choice == "system" or library is None or "jemalloc" in preload:
        return None
    return {**environ, "LD_PRELOAD": f"{library} {preload}".strip(),
            "MALLOC_CONF": environ.get("MALLOC_CONF", MALLOC_CONF)}


def reexec_under_jemalloc() -> None:
    """Replace this process by the same command under jemalloc (see jemalloc_env); returns
    only when it stays as it is. Call first thing in a program's entry point."""
    env = jemalloc_env(os.environ, ctypes.util.find_library("jemalloc"))
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


def freeze_loaded_objects() -> int:
    """Move every object alive now (the models, the libraries: ~476k objects) out of the cyclic
    garbage collector's reach for good; call it once, after the models load and the session code
    is imported (pipeline.session, which brings livekit: ~115k objects more), in a program that
    owns its process. -> the number of objects frozen.

    Why: CPython runs a full collection only when the objects promoted since the last one
    exceed a quarter of those that survived it. With ~480k long-lived objects that is ~120k
    promotions, so a conversation's cyclic garbage (livekit's closed channels and their
    tracebacks, ~80 pymalloc blocks a turn in a real soak) waited ~1,500 turns (a probe saw
    no full collection in a soak's turns). Frozen, the loaded objects count no more and are not
    walked: a full collection right after took 0.0 ms where one of the loaded process took
    50-75 ms (2-core Xeon, embedded models). A 200-turn soak frozen before livekit was imported
    ran 4 (the longest 47 ms: livekit's ~115k objects were walked each time, and the garbage
    waited ~100 turns for them); frozen after, 7 (the longest 3.2 ms). The collection after the
    freeze resets the count of survivors the next trigger is measured from."""
    gc.collect()  # the loading's own garbage is freed, not frozen
    gc.freeze()
    gc.collect()
    return gc.get_freeze_count()


class _MallInfo2(ctypes.Structure):  # glibc >= 2.33, struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _libc() -> ctypes.CDLL:
    """The process's C library, opened once: each ctypes.CDLL defines a function-pointer class
    of its own, cyclic garbage when dropped (one a turn when the soak opened it per sample)."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _MallInfo2
    if hasattr(libc, "open_memstream"):  # a FILE * that writes into memory (pymalloc_arenas_mb)
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
        libc.fclose.argtypes, libc.free.argtypes = [ctypes.c_void_p], [ctypes.c_void_p]
    return libc


# jemalloc's statistics (bytes): allocated (what the program holds), active (its pages, so
# active - allocated is fragmentation in the runs), metadata, resident (pages jemalloc counts
# as touched, dirty ones not yet purged included), mapped, retained (virtual, not resident)
JEMALLOC_STATS = ("allocated", "active", "metadata", "resident", "mapped", "retained")


def jemalloc_stats_mb() -> dict[str, float] | None:
    """JEMALLOC_STATS in MiB, refreshed now; None when this process does not run on jemalloc."""
    if allocator_in_use() != "jemalloc":
        return None
    libc, out = _libc(), {}
    epoch = ctypes.c_uint64(1)  # refreshes the statistics
    libc.mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(ctypes.sizeof(epoch)))
    for name in JEMALLOC_STATS:
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
        if libc.mallctl(f"stats.{name}".encode(), ctypes.byref(value), ctypes.byref(size), None, ctypes.c_size_t(0)):
            return None
        out[name] = value.value / 2**20
    return out


_ARENAS = re.compile(rb"# arenas allocated current\s*=\s*([0-9]+)")
PYMALLOC_ARENA_MB = 1.0  # CPython >= 3.10 on 64-bit: 1 MiB arenas


def pymalloc_arenas_mb() -> float | None:
    """CPython's small-object arenas allocated now, in MiB (anonymous mappings the kernel merges
    when they are neighbours, so smaps cannot count them): from the interpreter's own statistics
    (_PyObject_DebugMallocStats, written into memory, not to stderr). None without pymalloc
    (PYTHONMALLOC=malloc) or without those statistics."""
    libc = _libc()
    stats = getattr(ctypes.pythonapi, "_PyObject_DebugMallocStats", None)
    if stats is None or not hasattr(libc, "open_memstream"):
        return None
    stats.argtypes, stats.restype = [ctypes.c_void_p], ctypes.c_int
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return None
    try:
        written = stats(stream)
    finally:
        libc.fclose(stream)  # sets buf and size
    try:
        text = ctypes.string_at(buf.value, size.value) if buf.value else b""
    finally:
        libc.free(buf)
    m = _ARENAS.search(text.replace(b",", b""))
    return int(m.group(1)) * PYMALLOC_ARENA_MB if written and m else None


def heap_in_use_mb() -> float | None:
    """Bytes malloc has handed out and not had back, in MiB: what the process's native code and
    Python's large objects hold, without the pages an allocator keeps (RSS minus this, roughly,
    is the allocator's and the mapped files'). jemalloc's stats.allocated, glibc's mallinfo2
    (in use + mmapped); None on any other allocator."""
    if allocator_in_use() == "jemalloc":
        stats = jemalloc_stats_mb()
        return None if stats is None else stats["allocated"]
    libc = _libc()
    if not hasattr(libc, "mallinfo2"):
        return None
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20
