"""CPU skinny matmul for decode and speculative verify: our C++ kernel against torch.

    python -m benchmarks.cpu_gemv [--threads 1] [--reps 7] [--json out.json]

One decode step's weights of SmolLM2-135M (30 layers of fused qkv [960, 576], o [576, 576],
gate_up [3072, 576], down [576, 1536], each layer its own copy so they stream from DRAM as in
the engine, plus the tied LM head [49152, 576]) multiplied by 1 to 8 activation rows (a decode
step and verify passes of k = 1..7 drafted tokens), fp32 / bf16 / int8 / q4 weights. Per cell:
median milliseconds of one pass over all of them through `kernels.cpu_gemv` (what the engine
calls, launcher included) and through `F.linear` on the same weights (torch has no int8 or q4 route
to compare), measured side by side, and the ratio of n rows to 1 row.
"""

from __future__ import annotations

import argparse
import json
import platform

import torch
import torch.nn.functional as F

from benchmarks.timing import median_seconds
from kernels.cpu_gemv import cpu_gemv, cpu_gemv_available, cpu_gemv_i8, cpu_gemv_q4, quantize_q4
from kernels.cpu_native import cpu_flags

LAYERS = 30
LAYER_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # [N, K] per layer
LM_HEAD = (49152, 576)
ROWS = (1, 2, 4, 6, 8)
FORMATS = ("fp32", "bf16", "int8", "q4")


def _weights(fmt: str, g: torch.Generator) -> list[tuple]:
    """One step's weights in `fmt`: (w, scale, wsum) for int8, (nibbles, dm) for q4 (whose LM
    head is int8, as in the engine: llm_engine.quant), (w,) otherwise."""
    out = []
    shapes = [s for _ in range(LAYERS) for s in LAYER_SHAPES] + [LM_HEAD]
    for i, (n, k) in enumerate(shapes):
        w = torch.randn(n, k, generator=g) * k**-0.5
        if fmt == "int8" or (fmt == "q4" and i == len(shapes) - 1):
            scale = w.abs().amax(dim=1) / 127.0
            q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
            out.append((q, scale, q.to(torch.int32).sum(1).to(torch.int32)))
        elif fmt == "q4":
            out.append(quantize_q4(w))
        else:
            out.append((w.to(torch.bfloat16 if fmt == "bf16" else torch.float32).contiguous(),))
    return out


def _ours(x: dict, w: tuple) -> torch.Tensor:
    if len(w) == 3:
        return cpu_gemv_i8(x[w[0].shape[1]], *w)
    if len(w) == 2:  # q4: the nibbles hold two weights a byte
        return cpu_gemv_q4(x[2 * w[0].shape[1]], *w)
    return cpu_gemv(x[w[0].shape[1]], w[0])


def _median_ms(fn, reps: int) -> float:
    return median_seconds(fn, reps, warmup=1) * 1e3


def bench(fmt: str, ws: list[tuple], rows: int, reps: int) -> dict:
    x = {k: torch.randn(rows, k) for _, k in (*LAYER_SHAPES, LM_HEAD)}
    ours = lambda: [_ours(x, w) for w in ws]  # noqa: E731
    theirs = None  # torch has no int8 or 4-bit route to compare
    if fmt in ("fp32", "bf16"):
        xt = {k: v.to(ws[0][0].dtype) for k, v in x.items()}
        theirs = lambda: [F.linear(xt[w.shape[1]], w) for (w,) in ws]  # noqa: E731
    cell = {"format": fmt, "rows": rows, "ours_ms": _median_ms(ours, reps)}
    cell["torch_ms"] = _median_ms(theirs, reps) if theirs else None
    return cell


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if not cpu_gemv_available():
        raise SystemExit("the C++ CPU gemv did not build (see kernels/cpu_native.py)")
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    cells = []
    for fmt in FORMATS:
        ws = _weights(fmt, g)
        cells += [bench(fmt, ws, r, args.reps) for r in ROWS]
        del ws
    one = {c["format"]: c["ours_ms"] for c in cells if c["rows"] == 1}
    print(f"{'format':>6} {'rows':>4} {'ours ms':>8} {'torch ms':>8} {'torch/ours':>10} {'x 1 row':>7}")
    for c in cells:
        c["x_one_row"] = c["ours_ms"] / one[c["format"]]
        torch_ms = f"{c['torch_ms']:8.1f} {c['torch_ms'] / c['ours_ms']:10.2f}" if c["torch_ms"] else f"{'-':>8} {'-':>10}"
        print(f"{c['format']:>6} {c['rows']:4d} {c['ours_ms']:8.1f} {torch_ms} {c['x_one_row']:7.2f}")
    isa = [f for f in ("avx512bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma") if f in cpu_flags()]
    out = {"threads": args.threads, "cpu": platform.processor() or platform.machine(), "cpu_flags": isa,
           "layers": LAYERS, "cells": cells}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
