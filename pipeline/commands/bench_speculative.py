"""`parley bench speculative`: speculative decoding at batch 1 (logic in benchmarks/speculative.py)."""

from __future__ import annotations


def register_bench(sub) -> None:
    p = sub.add_parser("speculative", help="plain vs n-gram / EAGLE head / both: tok/s, acceptance")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1, help="passes over the prompt set, pooled")
    p.add_argument("--fixed-k", action="store_true", help="draft k tokens every step (no adaptive length)")
    p.add_argument("--head", default="", help="EAGLE head safetensors (default: the shipped one)")
    p.add_argument("--weights", default="fp32,bf16", help="comma-separated weight formats")
    p.add_argument("--json", default="")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from benchmarks.speculative import main

    argv = ["--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--k", str(args.k),
            "--repeats", str(args.repeats), "--weights", args.weights, "--json", args.json]
    if args.fixed_k:
        argv.append("--fixed-k")
    if args.head:
        argv += ["--head", args.head]
    main(argv)
    return 0
