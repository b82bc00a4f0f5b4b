"""CPU paged attention for decode and speculative verify: our C++ kernel against torch.

    python -m benchmarks.cpu_attention [--threads 1] [--json out.json]

SmolLM2-135M's attention shape (9 query heads over 3 KV heads, head size 64, 16-token
blocks scattered in the cache), one sequence, 1 to 8 query rows (a decode step and verify
passes of k = 1..7 drafted tokens) at 100 / 300 / 1,000 cached keys. Per cell: median
microseconds of `kernels.cpu_ops.paged_attention` (what the engine calls, launcher included)
and of the torch reference (`prefill_attention_ref`: gather the blocks, SDPA), measured side
by side, and the ratio of n rows to 1 row (what a verify pass pays per extra row).
"""

from __future__ import annotations

import argparse
import json
import platform

import torch

from benchmarks.timing import median_seconds
from kernels import cpu_ops
from kernels.prefill_attention import prefill_attention_ref

HQ, HK, D, BS = 9, 3, 64, 16
CONTEXTS = (100, 300, 1000)
ROWS = (1, 2, 4, 6, 8)


def _median_us(fn, reps: int) -> float:
    return median_seconds(fn, reps, warmup=10) * 1e6


def bench(ctx: int, rows: int, reps: int) -> dict:
    g = torch.Generator().manual_seed(ctx * 10 + rows)
    nb = -(-ctx // BS) + 4
    kc, vc = torch.randn(nb, BS, HK, D, generator=g), torch.randn(nb, BS, HK, D, generator=g)
    tables = torch.randperm(nb, generator=g)[: -(-ctx // BS)].to(torch.int32)[None]  # scattered blocks
    q = torch.randn(rows, HQ, D, generator=g)
    cu, lens = torch.tensor([0, rows], dtype=torch.int32), torch.tensor([ctx], dtype=torch.int32)
    args = (q, kc, vc, tables, cu, lens, D**-0.5)
    return {"ctx": ctx, "rows": rows, "ours_us": _median_us(lambda: cpu_ops.paged_attention(*args), reps),
            "torch_us": _median_us(lambda: prefill_attention_ref(*args), max(reps // 4, 20))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if cpu_ops._ops() is None:
        raise SystemExit("the C++ CPU ops did not build (see kernels/cpu_native.py)")
    torch.set_num_threads(args.threads)
    cells = [bench(c, r, args.reps) for c in CONTEXTS for r in ROWS]
    one = {c["ctx"]: c["ours_us"] for c in cells if c["rows"] == 1}
    print(f"{'keys':>5} {'rows':>4} {'ours us':>8} {'torch us':>8} {'torch/ours':>10} {'x 1 row':>7}")
    for c in cells:
        c["x_one_row"] = c["ours_us"] / one[c["ctx"]]
        print(f"{c['ctx']:5d} {c['rows']:4d} {c['ours_us']:8.1f} {c['torch_us']:8.1f} "
              f"{c['torch_us'] / c['ours_us']:10.2f} {c['x_one_row']:7.2f}")
    out = {"threads": args.threads, "cpu": platform.processor() or platform.machine(),
           "shape": {"hq": HQ, "hk": HK, "d": D, "block_size": BS}, "cells": cells}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
