"""`parley bench <name>`: the benchmarks that users run. Each one is a module under
pipeline/commands/ exposing `register_bench(subparsers)`; the list below is the group."""

from __future__ import annotations

import importlib

BENCH_MODULES: tuple[str, ...] = (
    "pipeline.commands.bench_llm",
    "pipeline.commands.bench_speculative",
    "pipeline.commands.bench_turn",
)


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark (see `parley bench -h`)")
    bench_sub = p.add_subparsers(dest="bench", metavar="BENCH")
    for name in BENCH_MODULES:
        importlib.import_module(name).register_bench(bench_sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
