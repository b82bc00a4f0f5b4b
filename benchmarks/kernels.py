"""Kernel benchmarks: achieved bandwidth and time of each Triton kernel against its torch
reference (and F.scaled_dot_product_attention for attention), plus the engine's batch-1
decode tokens/s on a random-weight Llama-3-8B-shaped model against the bandwidth roofline.

    python benchmarks/kernels.py                      # CUDA: full run, JSON to benchmarks/results/
    python benchmarks/kernels.py --cpu-smoke          # CPU: tiny shapes through the interpreter
    python benchmarks/kernels.py --engine             # also the engine decode benchmark (CUDA)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H200_PEAK_GBS = 4800.0  # HBM3e, NVIDIA's H200 datasheet figure


def _time_ms(fn, cuda: bool, reps: int) -> float:
    """Median milliseconds per call."""
    if cuda:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class Bench:
    def __init__(self, device: str, smoke: bool) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device == "cuda"
        self.smoke = smoke
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        self.backend = "triton"
        self.rows: list[dict] = []

    def record(self, op: str, shape: dict, fns: dict, nbytes: int | None = None, flops: int | None = None):
        row = {"op": op, **shape}
        for name, fn in fns.items():
            if fn is None:
                continue
            ms = _time_ms(fn, self.cuda, reps=2 if self.smoke else 5)
            row[f"{name}_ms"] = round(ms, 4)
            if nbytes:
                row[f"{name}_GBs"] = round(nbytes / ms / 1e6, 1)
            if flops:
                row[f"{name}_TFLOPs"] = round(flops / ms / 1e9, 2)
        if nbytes and "triton_GBs" in row:
            row["triton_pct_peak"] = round(100 * row["triton_GBs"] / H200_PEAK_GBS, 1)
        for other in ("torch_ref", "sdpa"):
            if f"{other}_ms" in row and "triton_ms" in row:
                row[f"speedup_vs_{other}"] = round(row[f"{other}_ms"] / row["triton_ms"], 2)
        self.rows.append(row)
        print(json.dumps(row), flush=True)

    def randn(self, *shape):
        return self.torch.randn(*shape, device=self.device).to(self.dtype)


def bench_elementwise(b: Bench) -> None:
    import kernels

    torch = b.torch
    es = b.torch.finfo(b.dtype).bits // 8
    hidden, inter = (64, 96) if b.smoke else (4096, 14336)
    for t in (1, 4) if b.smoke else (1, 32, 4096):
        x, r, w = b.randn(t, hidden), b.randn(t, hidden), b.randn(hidden)
        b.record("rms_norm_residual", {"tokens": t, "hidden": hidden},
                 {"triton": lambda x=x, r=r, w=w: kernels.rms_norm(x, w, 1e-5, r, backend=b.backend),
                  "torch_ref": lambda x=x, r=r, w=w: kernels.rms_norm_ref(x, w, 1e-5, r)},
                 nbytes=(4 * t * hidden + hidden) * es)
        g = b.randn(t, 2 * inter)
        b.record("silu_and_mul", {"tokens": t, "inter": inter},
                 {"triton": lambda g=g: kernels.silu_and_mul(g, backend=b.backend),
                  "torch_ref": lambda g=g: kernels.silu_and_mul_ref(g)}, nbytes=3 * t * inter * es)
        hq, hk, d = (4, 2, 16) if b.smoke else (32, 8, 128)
        q, k = b.randn(t, hq, d), b.randn(t, hk, d)
        pos = torch.arange(t, device=b.device)
        ang = torch.rand(max(t, 8), d // 2, device=b.device)
        cos, sin = ang.cos(), ang.sin()
        b.record("rotary", {"tokens": t, "hq": hq, "hk": hk, "d": d},
                 {"triton": lambda q=q, k=k, pos=pos, c=cos, s=sin: kernels.rotary(q, k, pos, c, s, backend=b.backend),
                  "torch_ref": lambda q=q, k=k, pos=pos, c=cos, s=sin: kernels.rotary_ref(q, k, pos, c, s)},
                 nbytes=2 * t * (hq + hk) * d * es)
        nb, bs = -(-t // 16) + 1, 16
        kc, vc = b.randn(nb, bs, hk, d), b.randn(nb, bs, hk, d)
        slots = torch.arange(t, device=b.device)
        b.record("store_kv", {"tokens": t, "hk": hk, "d": d},
                 {"triton": lambda k=k, kc=kc, vc=vc, slots=slots: kernels.store_kv(k, k, kc, vc, slots,
                                                                                    backend=b.backend),
                  "torch_ref": lambda k=k, kc=kc, vc=vc, slots=slots: kernels.store_kv_ref(k, k, kc, vc, slots)},
                 nbytes=4 * t * hk * d * es)


def _paged(b: Bench, batch: int, ctx: int, hk: int, d: int, bs: int = 16):
    torch = b.torch
    per = -(-ctx // bs)
    kc, vc = b.randn(batch * per, bs, hk, d), b.randn(batch * per, bs, hk, d)
    table = torch.randperm(batch * per, device=b.device).int().view(batch, per)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=b.device)
    return kc, vc, table, lens


def bench_attention(b: Bench) -> None:
    import torch.nn.functional as F

    import kernels

    torch = b.torch
    hq, hk, d = (8, 2, 64) if b.smoke else (32, 8, 128)
    es = torch.finfo(b.dtype).bits // 8
    contexts = (40, 100) if b.smoke else (1024, 2048, 4096, 8192, 16384, 32768)
    for batch in (1, 2) if b.smoke else (1, 32):
        for ctx in contexts:
            kc, vc, table, lens = _paged(b, batch, ctx, hk, d)
            q = b.randn(batch, hq, d)
            kd = kc[table.long()].reshape(batch, -1, hk, d).transpose(1, 2)  # [B, Hk, ctx, D] contiguous-ish
            kd, vd = kd.contiguous(), vc[table.long()].reshape(batch, -1, hk, d).transpose(1, 2).contiguous()
            q4 = q[:, :, None, :]  # [B, Hq, 1, D]
            ref_ok = b.smoke or ctx <= 8192  # the looped reference is slow, keep the run short
            b.record("decode_attention", {"batch": batch, "context": ctx, "hq": hq, "hk": hk, "d": d},
                     {"triton": lambda q=q, kc=kc, vc=vc, t=table, n=lens: kernels.decode_attention(
                         q, kc, vc, t, n, d**-0.5, backend=b.backend),
                      "triton_no_split": lambda q=q, kc=kc, vc=vc, t=table, n=lens: kernels.decode_attention(
                          q, kc, vc, t, n, d**-0.5, backend=b.backend, num_splits=1),
                      "torch_ref": (lambda q=q, kc=kc, vc=vc, t=table, n=lens: kernels.decode_attention_ref(
                          q, kc, vc, t, n, d**-0.5)) if ref_ok else None,
                      "sdpa": lambda q4=q4, kd=kd, vd=vd: F.scaled_dot_product_attention(
                          q4, kd, vd, enable_gqa=True)},
                     nbytes=2 * batch * ctx * hk * d * es + 2 * batch * hq * d * es)
            del kc, vc, kd, vd
    for runs in ([[(24, 24), (8, 40)]] if b.smoke else [[(2048, 2048)], [(512, 512)] * 4, [(512, 4096)]]):
        ctx_max = max(c for _, c in runs)
        kc, vc, table, _ = _paged(b, len(runs), ctx_max, hk, d)
        lens = torch.tensor([c for _, c in runs], dtype=torch.int32, device=b.device)
        cu = torch.tensor([0, *torch.tensor([n for n, _ in runs]).cumsum(0).tolist()], dtype=torch.int32,
                          device=b.device)
        q = b.randn(int(cu[-1]), hq, d)
        n0, c0 = runs[0]
        qs = b.randn(len(runs), hq, n0, d)
        ks, vs = b.randn(len(runs), hq, c0, d), b.randn(len(runs), hq, c0, d)
        max_q = max(n for n, _ in runs)
        flops = sum(4 * n * (c - n + (n + 1) / 2) * hq * d for n, c in runs)
        b.record("prefill_attention", {"runs": runs, "hq": hq, "hk": hk, "d": d},
                 {"triton": lambda q=q, kc=kc, vc=vc, t=table, cu=cu, n=lens, m=max_q: kernels.prefill_attention(
                     q, kc, vc, t, cu, n, d**-0.5, backend=b.backend, max_q_len=m),
                  "torch_ref": lambda q=q, kc=kc, vc=vc, t=table, cu=cu, n=lens: kernels.prefill_attention_ref(
                      q, kc, vc, t, cu, n, d**-0.5),
                  # dense causal SDPA on the same query/key counts (no paging, no prefix offset)
                  "sdpa": (lambda qs=qs, ks=ks, vs=vs: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
                  if n0 == c0 else None},
                 flops=int(flops))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Triton kernel benchmarks")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (interpreter)")
    p.add_argument("--engine", action="store_true", help="also the engine decode benchmark (CUDA)")
    p.add_argument("--engine-only", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported
    sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() and not args.cpu_smoke else "cpu"
    if device == "cpu" and not args.cpu_smoke:
        p.error("no CUDA device: use --cpu-smoke")
    b = Bench(device, args.cpu_smoke)
    torch.manual_seed(0)
    result = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "gpu": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.processor()})",
              "command": " ".join(["python", "benchmarks/kernels.py", *(argv or sys.argv[1:])]),
              "torch": torch.__version__, "peak_GBs_assumed": H200_PEAK_GBS}
    if not args.engine_only:
        bench_elementwise(b)
        bench_attention(b)
    result["kernels"] = b.rows
    if (args.engine or args.engine_only) and device == "cuda":
        from benchmarks.kernels_engine import bench_engine_decode  # ROOT is on sys.path

        result["engine"] = bench_engine_decode()
    if not args.cpu_smoke:
        args.out.mkdir(parents=True, exist_ok=True)
        kind = "kernels-engine" if args.engine_only else "kernels"
        name = f"{kind}-{result['date'][:10]}-{result['gpu'].replace(' ', '_')}.json"
        (args.out / name).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
