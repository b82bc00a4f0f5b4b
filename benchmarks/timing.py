"""Shared timing for the kernel benchmarks: median wall time of a call after warm-up calls."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
