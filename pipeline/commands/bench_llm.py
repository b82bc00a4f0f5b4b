"""`parley bench llm`: the LLM engine benchmark (logic and options in benchmarks/llm_engine.py)."""

from __future__ import annotations

from pipeline.commands.bench import register_forwarded


def register_bench(sub) -> None:
    register_forwarded(sub, "llm", "LLM engine vs transformers: decode tok/s, TTFT, memory", "benchmarks.llm_engine")
