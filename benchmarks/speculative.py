"""Speculative decoding at batch 1 on the CPU: plain vs each drafter, in one run.

    python -m benchmarks.speculative [--max-tokens 48] [--threads 1] [--k 5] [--json out.json]

Per method: decode tokens/s (generated tokens / wall time after the prompt is prefilled is
not separable here, so the whole request wall time is used, prefill included, for every
method alike), time to the first 12 tokens (about the first spoken clause), acceptance rate,
mean accepted length (tokens per target pass), and whether greedy outputs equal plain
decoding. Prompts: benchmarks/data/voice_prompts.json (fixed, committed). The target is our
engine (LLMEngine, embedded SmolLM2-135M-Instruct, fp32, paged KV) through EngineTarget;
prefix caching is off so every method prefills the same prompt tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from llm_engine.speculative import HeadDrafter, NgramDrafter, SpecRequest, SpeculativeDecoder, load_head
from llm_engine.speculative.engine_target import EngineTarget

DATA = Path(__file__).parent / "data" / "voice_prompts.json"


def load_prompts(engine) -> list[tuple[str, bool, list[int]]]:
    spec = json.loads(DATA.read_text())
    out = []
    for chat in spec["chats"]:
        msgs = [{"role": "system", "content": spec["system"]}, *chat["messages"]]
        out.append((chat["id"], chat["repeats_context"], engine.encode_chat(msgs)))
    return out


def run_method(target, drafter, prompts, max_tokens, k, eos):
    rows = []
    dec = SpeculativeDecoder(target, drafter, k_max=k, adaptive=True,
                             draft_cost=0.0 if drafter is None or drafter.name == "ngram" else 0.05)
    for pid, rep, ids in prompts:
        before = (dec.metrics.drafted, dec.metrics.accepted, dec.metrics.passes, dec.metrics.emitted)
        r = SpecRequest(pid, ids, max_tokens=max_tokens, stop_ids=eos)
        t0 = time.perf_counter()
        dec.generate([r], mark=(12,))
        wall = time.perf_counter() - t0
        m = dec.metrics
        d = [a - b for a, b in zip((m.drafted, m.accepted, m.passes, m.emitted), before)]
        rows.append({"id": pid, "repeats_context": rep, "tokens": r.output, "wall_s": wall,
                     "tok_s": len(r.output) / wall, "t12_s": r.first_tokens_s.get(12, wall),
                     "drafted": d[0], "accepted": d[1], "passes": d[2], "emitted": d[3]})
    return rows


def summarize(rows, plain_rows=None):
    def agg(sel):
        drafted, acc = sum(r["drafted"] for r in sel), sum(r["accepted"] for r in sel)
        passes, emitted = sum(r["passes"] for r in sel), sum(r["emitted"] for r in sel)
        return {"tok_s": sum(len(r["tokens"]) for r in sel) / sum(r["wall_s"] for r in sel),
                "t12_s_median": statistics.median(r["t12_s"] for r in sel),
                "acceptance_rate": acc / drafted if drafted else 0.0,
                "mean_accepted_length": emitted / passes if passes else 1.0}

    out = {"all": agg(rows), "repeat": agg([r for r in rows if r["repeats_context"]]),
           "open": agg([r for r in rows if not r["repeats_context"]])}
    if plain_rows is not None:
        out["identical_greedy"] = all(a["tokens"] == b["tokens"] for a, b in zip(rows, plain_rows))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="speculative decoding benchmark (batch 1, CPU)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from llm_engine import LLMEngine

    engine = LLMEngine.from_pretrained(enable_prefix_caching=False)
    target = EngineTarget(engine)
    prompts = load_prompts(engine)
    eos = tuple(sorted(engine.eos_token_ids))
    w, eps = target.norm()
    methods = {"plain": None, "ngram": NgramDrafter(),
               "head": HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps)}
    run_method(target, None, prompts[:1], 8, args.k, eos)  # warm-up
    results, plain = {}, None
    for name, drafter in methods.items():
        rows = run_method(target, drafter, prompts, args.max_tokens, args.k, eos)
        plain = rows if name == "plain" else plain
        results[name] = summarize(rows, None if name == "plain" else plain)
        results[name]["rows"] = [{k: v for k, v in r.items() if k != "tokens"} for r in rows]
    base = results["plain"]["all"]["tok_s"]
    print(f"{'method':8} {'subset':7} {'tok/s':>7} {'speedup':>7} {'t12 ms':>7} {'accept':>7} {'tau':>5} same")
    for name, res in results.items():
        for subset in ("all", "repeat", "open"):
            s = res[subset]
            print(f"{name:8} {subset:7} {s['tok_s']:7.1f} {s['tok_s'] / base:7.2f} {s['t12_s_median'] * 1e3:7.0f} "
                  f"{s['acceptance_rate']:7.2f} {s['mean_accepted_length']:5.2f} {res.get('identical_greedy', '-')}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
