"""`parley bench <name>`: the benchmarks that users run. Each one is a module under
pipeline/commands/ exposing `register_bench(subparsers)`; the list below is the group."""

from __future__ import annotations

import importlib

BENCH_MODULES: tuple[str, ...] = (
    "pipeline.commands.bench_llm",
    "pipeline.commands.bench_speculative",
    "pipeline.commands.bench_turn",
    "pipeline.commands.bench_voice",
)


def register_forwarded(sub, name: str, help: str, module: str) -> None:
    """`parley bench NAME ARGS...` runs `module.main(ARGS)`: the benchmark's own parser is the
    one list of its options (`parley bench NAME -h` prints it, under that name), and the module (torch and the
    engine behind it) is imported only when that benchmark runs."""
    p = sub.add_parser(name, help=help, add_help=False, description=f"options: parley bench {name} -h")

    def run(args) -> int:
        importlib.import_module(module).main(args.rest, prog=f"parley bench {name}")
        return 0

    p.set_defaults(func=run, forwards=True)


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark (see `parley bench -h`)")
    bench_sub = p.add_subparsers(dest="bench", metavar="BENCH")
    for name in BENCH_MODULES:
        importlib.import_module(name).register_bench(bench_sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
