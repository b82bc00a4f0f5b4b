"""`parley bench llm`: the LLM engine benchmark (logic in benchmarks/llm_engine.py)."""

from __future__ import annotations


def register_bench(sub) -> None:
    p = sub.add_parser("llm", help="LLM engine vs transformers: decode tok/s, TTFT, memory")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--flat-requests", type=int, default=1000)
    p.add_argument("--no-hf", action="store_true")
    p.add_argument("--json", default=None)
    p.set_defaults(func=_run)


def _run(args) -> int:
    from benchmarks.llm_engine import main

    argv = ["--threads", *map(str, args.threads), "--tokens", str(args.tokens),
            "--flat-requests", str(args.flat_requests)]
    if args.no_hf:
        argv.append("--no-hf")
    if args.json:
        argv += ["--json", args.json]
    main(argv)
    return 0
