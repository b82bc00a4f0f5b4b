"""Speculative decoding at batch 1 on the CPU: plain vs each drafter, side by side in one run.

    python -m benchmarks.speculative [--max-tokens 48] [--threads 1] [--k 5] [--repeats 1]
                                     [--fixed-k] [--head FILE] [--weights fp32,bf16] [--json out.json]

Methods: plain decoding, n-gram lookup, the trained EAGLE head, and "auto" (the head with
n-gram lookup in front, what SpeculativeConfig(method="auto") builds). Per weight format (fp32,
and bf16 weights where the verify pass costs about the same for 1 to 8 query tokens) and
method: decode tokens/s after the first token (prefill and the first token
are identical across methods and would dilute the ratio), whole-request tokens/s (prefill
included), time to the first 12 tokens (about the first spoken clause), acceptance rate, mean
accepted length (tokens per target pass) and whether greedy outputs equal plain decoding in the
same weight format. The methods run interleaved prompt by prompt, so load from other processes
hits them alike; --repeats N runs the whole prompt set N times (pooled: the adaptive draft
length follows measured step times, so one pass over 8 prompts moves by ~0.1x run to run on a
shared host); --fixed-k drafts k tokens every step (no adaptive length: acceptance then
depends on the drafter alone, e.g. to compare head weights given with --head). Prompts:
benchmarks/data/voice_prompts.json (fixed, committed). The target is
our engine (LLMEngine, embedded SmolLM2-135M-Instruct, paged KV) through EngineTarget; prefix
caching is off so every method prefills the same prompt tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from llm_engine.speculative import (
    HeadDrafter,
    HybridDrafter,
    NgramDrafter,
    SpecRequest,
    SpeculativeDecoder,
    load_head,
)
from llm_engine.speculative.engine_target import EngineTarget

DATA = Path(__file__).parent / "data" / "voice_prompts.json"
SUBSETS = ("all", "repeat", "open")


def load_prompts(engine) -> list[tuple[str, bool, list[int]]]:
    spec = json.loads(DATA.read_text())
    out = []
    for chat in spec["chats"]:
        msgs = [{"role": "system", "content": spec["system"]}, *chat["messages"]]
        out.append((chat["id"], chat["repeats_context"], engine.encode_chat(msgs)))
    return out


def make_decoders(target, k: int, adaptive: bool = True, head_path: Path | None = None
                  ) -> dict[str, SpeculativeDecoder]:
    w, eps = target.norm()
    def head():
        weights = load_head(head_path) if head_path else load_head()
        return HeadDrafter(weights, target.embed_weight(), target.lm_head_weight(), w, eps)

    drafters = {"plain": None, "ngram": NgramDrafter(), "head": head(), "auto": HybridDrafter(head())}
    return {name: SpeculativeDecoder(target, d, k_max=k, adaptive=adaptive) for name, d in drafters.items()}


def run_one(dec: SpeculativeDecoder, pid: str, rep: bool, ids: list[int], max_tokens: int, eos) -> dict:
    m = dec.metrics
    before = (m.drafted, m.accepted, m.passes, m.emitted)
    r = SpecRequest(pid, ids, max_tokens=max_tokens, stop_ids=eos)
    t0 = time.perf_counter()
    dec.generate([r], mark=(1, 12))
    wall = time.perf_counter() - t0
    d = [a - b for a, b in zip((m.drafted, m.accepted, m.passes, m.emitted), before)]
    first = r.first_tokens_s.get(1, wall)
    return {"id": pid, "repeats_context": rep, "tokens": r.output, "wall_s": wall,
            "decode_s": wall - first, "ttft_s": first, "t12_s": r.first_tokens_s.get(12, wall),
            "drafted": d[0], "accepted": d[1], "passes": d[2], "emitted": d[3]}


def summarize(rows: list[dict], plain_rows: list[dict] | None) -> dict:
    def agg(sel):
        drafted, acc = sum(r["drafted"] for r in sel), sum(r["accepted"] for r in sel)
        passes, emitted = sum(r["passes"] for r in sel), sum(r["emitted"] for r in sel)
        n = sum(len(r["tokens"]) for r in sel)
        return {"decode_tok_s": (n - len(sel)) / sum(r["decode_s"] for r in sel),
                "tok_s": n / sum(r["wall_s"] for r in sel),
                "t12_s_median": statistics.median(r["t12_s"] for r in sel),
                "acceptance_rate": acc / drafted if drafted else 0.0,
                "mean_accepted_length": emitted / passes if passes else 1.0}

    out = {"all": agg(rows), "repeat": agg([r for r in rows if r["repeats_context"]]),
           "open": agg([r for r in rows if not r["repeats_context"]])}
    if plain_rows is not None:
        out["identical_greedy"] = all(a["tokens"] == b["tokens"] for a, b in zip(rows, plain_rows))
    out["rows"] = [{k: v for k, v in r.items() if k != "tokens"} for r in rows]
    return out


def bench_format(weight_format: str, max_tokens: int, k: int, repeats: int = 1, adaptive: bool = True,
                 head_path: Path | None = None) -> dict:
    from llm_engine import LLMEngine

    engine = LLMEngine.from_pretrained(enable_prefix_caching=False, weight_format=weight_format)
    target = EngineTarget(engine)
    prompts = load_prompts(engine)
    eos = tuple(sorted(engine.eos_token_ids))
    decs = make_decoders(target, k, adaptive, head_path)
    for dec in decs.values():  # warm-up (first-call allocations, oneDNN primitive caches)
        run_one(dec, *prompts[0], 8, eos)
        dec.metrics.__init__()
    rows: dict[str, list[dict]] = {name: [] for name in decs}
    for _ in range(repeats):
        for prompt in prompts:  # interleaved: noise from other processes hits every method alike
            for name, dec in decs.items():
                rows[name].append(run_one(dec, *prompt, max_tokens, eos))
    return {name: summarize(r, None if name == "plain" else rows["plain"]) for name, r in rows.items()}


def print_table(results: dict) -> None:
    print(f"{'weights':7} {'method':6} {'subset':6} {'dec tok/s':>9} {'x plain':>7} {'tok/s':>6} "
          f"{'x plain':>7} {'t12 ms':>6} {'accept':>6} {'tau':>5} same")
    for fmt, res in results.items():
        base = res["plain"]
        for name, r in res.items():
            for sub in SUBSETS:
                s, b = r[sub], base[sub]
                print(f"{fmt:7} {name:6} {sub:6} {s['decode_tok_s']:9.1f} {s['decode_tok_s'] / b['decode_tok_s']:7.2f} "
                      f"{s['tok_s']:6.1f} {s['tok_s'] / b['tok_s']:7.2f} {s['t12_s_median'] * 1e3:6.0f} "
                      f"{s['acceptance_rate']:6.2f} {s['mean_accepted_length']:5.2f} {r.get('identical_greedy', '-')}")


def main(argv: list[str] | None = None, prog: str | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=prog, description="speculative decoding benchmark (batch 1, CPU)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1, help="passes over the prompt set, pooled")
    ap.add_argument("--fixed-k", action="store_true", help="draft k tokens every step (no adaptive length)")
    ap.add_argument("--head", default="", help="EAGLE head safetensors (default: the shipped one)")
    ap.add_argument("--weights", default="fp32,bf16", help="comma-separated EngineConfig weight formats")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    head_path = Path(args.head) if args.head else None
    results = {fmt: bench_format(fmt, args.max_tokens, args.k, args.repeats, not args.fixed_k, head_path)
               for fmt in args.weights.split(",")}
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return results


if __name__ == "__main__":
    main()
