"""The engine's CPU step, side by side in one process: every decoder layer in one C++ call
(LlamaModel.fused_stack) against one call per layer, and the EAGLE head's int8 against its
bf16 weights, in streaming decode at 1 thread over the voice prompts.

    python -m benchmarks.cpu_layer_stack [--formats int8 q4] [--repeats 2] [--json F]

Each prompt runs under every variant before the next prompt, in an order that flips every
prompt, so load drift on a shared machine hits every variant alike. The variants share one
set of weights; the stack is switched off by setting the model's fused_stack to None (the
per-layer path is the fallback the engine keeps for steps the stack does not cover).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

import torch

from benchmarks.llm_engine import machine
from benchmarks.llm_streaming import streams, summarize, voice_chats
from llm_engine import LLMEngine, SamplingParams
from llm_engine.speculative import SpeculativeConfig
from llm_engine.speculative.engine_target import EngineTarget
from llm_engine.speculative.head_drafter import HeadDrafter, load_head


def with_head(plain: LLMEngine, dtype: torch.dtype) -> LLMEngine:
    """An engine on plain's weights speculating with "auto" whose head stores its weights in dtype."""
    e = LLMEngine(plain.model, plain.tokenizer, plain.config)
    e.speculative = SpeculativeConfig(method="auto")
    spec = e._speculator()
    target = EngineTarget(e)
    w, eps = target.norm()
    spec.drafter.head = HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps,
                                    weight_dtype=dtype)
    return e


def compare(fmt: str, repeats: int, max_tokens: int, chats: list | None = None) -> dict[str, Any]:
    plain = LLMEngine.from_pretrained(weight_format=fmt, max_cache_tokens=8192)
    engines = {"plain": plain, "auto_int8_head": with_head(plain, torch.int8),
               "auto_bf16_head": with_head(plain, torch.bfloat16)}
    chats = chats or voice_chats()
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    stack = plain.model.fused_stack
    variants = [(name, on) for name in engines for on in (True, False)]
    for e in engines.values():  # warm-up: kernels, the heads' copies, the step-cost estimates
        asyncio.run(streams(e, chats[:1], params, 1))
    runs: dict[tuple[str, bool], list] = {v: [] for v in variants}
    try:
        for rep in range(repeats):
            for j, chat in enumerate(chats):
                for name, on in variants if (j + rep) % 2 == 0 else variants[::-1]:
                    plain.model.fused_stack = stack if on else None
                    runs[(name, on)] += asyncio.run(streams(engines[name], [chat], params, 1))
    finally:
        plain.model.fused_stack = stack
    out: dict[str, Any] = {}
    for (name, on), r in runs.items():
        out[f"{name}_stack_{'on' if on else 'off'}"] = summarize(r, 1)
    tok = {k: v["decode_tok_s"] for k, v in out.items()}
    out["stack_on_over_off"] = {name: tok[f"{name}_stack_on"] / tok[f"{name}_stack_off"] for name in engines}
    out["int8_head_over_bf16_head"] = tok["auto_int8_head_stack_on"] / tok["auto_bf16_head_stack_on"]
    out["auto_over_plain"] = tok["auto_int8_head_stack_on"] / tok["plain_stack_on"]
    texts = {v: [x["text"] for x in r] for v, r in runs.items()}
    out["greedy_identical"] = all(t == texts[variants[0]] for t in texts.values())
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", nargs="+", default=["int8", "q4"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    res: dict[str, Any] = {"machine": machine(), "threads": 1, "repeats": a.repeats, "max_tokens": a.tokens,
                           "formats": {}}
    for fmt in a.formats:
        r = res["formats"][fmt] = compare(fmt, a.repeats, a.tokens)
        print(f"{fmt}: " + " | ".join(f"{k} {v['decode_tok_s']:.1f} tok/s, first clause {v['first_clause_ms']:.0f} ms"
                                      for k, v in r.items() if isinstance(v, dict) and "decode_tok_s" in v), flush=True)
        print(f"{fmt}: stack on/off {r['stack_on_over_off']}, int8/bf16 head {r['int8_head_over_bf16_head']:.3f}, "
              f"auto/plain {r['auto_over_plain']:.3f}, greedy identical {r['greedy_identical']}", flush=True)
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == "__main__":
    main()
