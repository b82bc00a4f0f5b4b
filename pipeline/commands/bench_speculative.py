"""`parley bench speculative`: speculative decoding at batch 1 (logic and options in
benchmarks/speculative.py)."""

from __future__ import annotations

from pipeline.commands.bench import register_forwarded


def register_bench(sub) -> None:
    register_forwarded(sub, "speculative", "plain vs n-gram / EAGLE head / both: tok/s, acceptance",
                       "benchmarks.speculative")
