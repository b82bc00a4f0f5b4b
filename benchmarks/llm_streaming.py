"""The streaming section of the LLM engine benchmark (`parley bench llm --stream`): the serving
path (stream_chat, speculation inside the engine step, prefill ahead), measured at 1 thread.

Per weight format, two engines share one set of weights (speculation off, and "auto"), and
every measurement alternates between them so load drift on a shared machine hits both alike.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

from llm_engine import LLMEngine, SamplingParams
from llm_engine.speculative import SpeculativeConfig

CLAUSE_END = re.compile(r"[.,!?;:]")
FIRST_CLAUSE_DELTAS = 8  # no punctuation yet: a TTS chunker speaks after this many words anyway


def voice_chats() -> list[list[dict[str, str]]]:
    spec = json.loads((Path(__file__).parent / "data" / "voice_prompts.json").read_text())
    return [[{"role": "system", "content": spec["system"]}, *c["messages"]] for c in spec["chats"]]


async def one_stream(engine: LLMEngine, messages, params: SamplingParams) -> dict[str, Any]:
    t0 = time.perf_counter()
    first = clause = None
    text, n = "", 0
    stream = engine.stream_chat(messages, params)
    async for delta in stream:
        now = time.perf_counter()
        n += 1
        text += delta
        first = first if first is not None else now
        if clause is None and (CLAUSE_END.search(text) or n >= FIRST_CLAUSE_DELTAS):
            clause = now
    end = time.perf_counter()
    out = stream.output
    m = out.metrics
    return {"ttft_s": (first or end) - t0, "first_clause_s": (clause or end) - t0, "end": end, "first": first or end,
            "tokens": len(out.token_ids), "text": out.text, "drafted": m.get("drafted", 0.0),
            "accepted": m.get("accepted", 0.0), "passes": m.get("passes", 0.0), "cached": out.num_cached_tokens,
            "prompt_tokens": len(out.prompt_token_ids)}


async def streams(engine: LLMEngine, chats, params: SamplingParams, clients: int) -> list[dict[str, Any]]:
    """clients streams at a time (asyncio.gather), chats in order."""
    out = []
    for i in range(0, len(chats), clients):
        group = await asyncio.gather(*(one_stream(engine, c, params) for c in chats[i: i + clients]))
        span = max(r["end"] for r in group) - min(r["first"] for r in group)
        for r in group:
            r["group_decode_s"] = span / len(group)  # the group's decode wall time, shared out
        out.extend(group)
    return out


def summarize(runs: list[dict[str, Any]], clients: int) -> dict[str, float]:
    toks = sum(r["tokens"] - 1 for r in runs)
    if clients == 1:
        decode_s = sum(r["end"] - r["first"] for r in runs)
    else:
        decode_s = sum(r["group_decode_s"] for r in runs)
    drafted, accepted, passes = (sum(r[k] for r in runs) for k in ("drafted", "accepted", "passes"))
    return {"ttft_ms": 1e3 * statistics.median(r["ttft_s"] for r in runs),
            "first_clause_ms": 1e3 * statistics.median(r["first_clause_s"] for r in runs),
            "decode_tok_s": toks / decode_s,
            "acceptance": accepted / drafted if drafted else 0.0,
            "tokens_per_pass": sum(r["tokens"] - 1 for r in runs) / passes if passes else 1.0}


def fp32_nll(ref: LLMEngine, engines: dict[str, LLMEngine], max_tokens: int) -> dict[str, float]:
    """Mean negative log-likelihood per token, under the fp32 model, of each format's greedy
    replies to the voice prompts: a reply that leaves fp32's path at a near-tie costs almost
    nothing here, one that says something fp32 finds unlikely costs a lot (fp32's own greedy
    replies are the reference)."""
    from dataclasses import replace

    import torch

    from llm_engine.speculative.engine_target import EngineTarget

    scorer = LLMEngine(ref.model, ref.tokenizer, replace(ref.config, enable_prefix_caching=False))
    target = EngineTarget(scorer)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    out: dict[str, float] = {}
    for fmt, e in engines.items():
        nll, n = 0.0, 0
        for i, chat in enumerate(voice_chats()):
            ids = e.encode_chat(chat)
            reply = e.generate([ids], params)[0].token_ids
            _, logits = target.extend(f"{fmt}-{i}", ids + reply)
            target.release(f"{fmt}-{i}")
            logp = torch.log_softmax(logits[len(ids) - 1: len(ids) - 1 + len(reply)], -1)
            nll -= float(logp[torch.arange(len(reply)), torch.tensor(reply)].sum())
            n += len(reply)
        out[fmt] = nll / n
    return out


def alternate(engines: dict[str, LLMEngine], j: int) -> list[tuple[str, LLMEngine]]:
    items = list(engines.items())
    return items if j % 2 == 0 else items[::-1]


def long_conversation(tag: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(interim, final): a ~300-token conversation; the interim lacks the last words of the user turn."""
    turns = [("Hi, can you help me plan my Saturday?", "Of course. What do you have so far?"),
             ("I have a dentist appointment at ten in the morning downtown.", "Got it, dentist at ten."),
             ("Then I want to buy groceries: eggs, milk, spinach, rice and two lemons.",
              "Noted: eggs, milk, spinach, rice and two lemons."),
             ("In the afternoon my sister Clara arrives by train at three fifteen.",
              "Clara arrives at three fifteen by train."),
             ("We want to cook dinner together and watch a movie after that.", "That sounds like a lovely plan."),
             ("Also remind me to call the plumber about the kitchen sink, it is leaking again.",
              "I will remind you to call the plumber about the sink.")]
    msgs = [{"role": "system", "content": f"You are a helpful voice assistant ({tag}). Answer briefly."}]
    for u, a in turns:
        msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    final = "So what time should I leave home to get to the dentist on time?"
    interim = final.rsplit(" ", 2)[0]
    return [*msgs, {"role": "user", "content": interim}], [*msgs, {"role": "user", "content": final}]


async def prefill_ahead(engine: LLMEngine, repeats: int = 3) -> dict[str, float]:
    """TTFT of the final prompt cold, after a prefill ahead of the interim words, and after the
    turn detector's score of the final words (the voice loop's order: the words are scored at
    the pause, then the reply is asked; they share every token but the reply's header)."""
    from pipeline.turn_text import EngineCompletenessScorer, without_end_punctuation

    params = SamplingParams(max_tokens=4, temperature=0.0)
    history: list[dict[str, str]] = []
    witness = EngineCompletenessScorer(engine, fallback=None, context=lambda: history)
    times: dict[str, list[float]] = {"cold": [], "ahead": [], "scored": []}
    cached: dict[str, list[int]] = {"ahead": [], "scored": []}
    n_prompt = 0
    for i in range(repeats):
        _, final = long_conversation(f"cold {i} {time.time()}")
        r = await one_stream(engine, final, params)
        times["cold"].append(r["ttft_s"])
        interim, final = long_conversation(f"ahead {i} {time.time()}")
        rid = engine.prefill(interim)
        for _ in range(2000):  # the user is still speaking: the prefill has time to finish
            if not engine.is_running(rid):
                break
            await asyncio.sleep(0.005)
        r = await one_stream(engine, final, params)
        times["ahead"].append(r["ttft_s"])
        cached["ahead"].append(r["cached"])
        n_prompt = r["prompt_tokens"]
        _, final = long_conversation(f"scored {i} {time.time()}")
        words = without_end_punctuation(final[-1]["content"])  # as the session asks the reply
        history[:] = final[:-1]
        ids = witness.prompt_ids(words)
        await asyncio.to_thread(engine.score_prompt, ids, witness.end_ids, 60.0)
        r = await one_stream(engine, [*history, {"role": "user", "content": words}], params)
        times["scored"].append(r["ttft_s"])
        cached["scored"].append(r["cached"])
    c, a, s = (statistics.median(times[k]) for k in ("cold", "ahead", "scored"))
    return {"prompt_tokens": n_prompt, "cached_tokens": statistics.median(cached["ahead"]), "ttft_cold_ms": 1e3 * c,
            "ttft_prefilled_ms": 1e3 * a, "prefilled_over_cold": a / c,
            "ttft_after_score_ms": 1e3 * s, "after_score_cached_tokens": statistics.median(cached["scored"]),
            "after_score_over_cold": s / c}


def stream_section(formats: list[str], max_tokens: int = 48, repeats: int = 1) -> dict[str, Any]:
    chats = voice_chats()
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    res: dict[str, Any] = {"prompts": len(chats), "max_tokens": max_tokens, "threads": 1, "repeats": repeats,
                           "formats": {}}
    plains: dict[str, LLMEngine] = {}
    for fmt in formats:
        plain = LLMEngine.from_pretrained(weight_format=fmt, max_cache_tokens=8192)
        spec = LLMEngine(plain.model, plain.tokenizer, plain.config)  # same weights, own cache
        spec.speculative = SpeculativeConfig(method="auto")
        engines = {"off": plain, "auto": spec}
        for e in engines.values():  # warm-up: kernels, the head's copies, the step-cost estimates
            asyncio.run(streams(e, chats[:2], params, 1))
        r: dict[str, Any] = {}
        texts: dict[str, dict[int, list[str]]] = {name: {} for name in engines}
        for clients in (1, 4):
            runs: dict[str, list] = {name: [] for name in engines}
            for _ in range(repeats):
                for j, i in enumerate(range(0, len(chats), clients)):  # A B, then B A: drift cancels
                    for name, e in alternate(engines, j):
                        runs[name] += asyncio.run(streams(e, chats[i: i + clients], params, clients))
            for name in engines:
                r[f"stream_c{clients}_{name}"] = summarize(runs[name], clients)
                texts[name][clients] = [x["text"] for x in runs[name]]
            r[f"stream_c{clients}_auto_over_off"] = (r[f"stream_c{clients}_auto"]["decode_tok_s"]
                                                     / r[f"stream_c{clients}_off"]["decode_tok_s"])
        gen: dict[str, list] = {name: [] for name in engines}
        for j, c in enumerate(chats):
            for name, e in alternate(engines, j):
                gen[name].append(e.chat([c], params)[0])
        gen_texts = {name: [o.text for o in outs] for name, outs in gen.items()}
        for name, outs in gen.items():
            r[f"generate_b1_{name}_tok_s"] = (sum(len(o.token_ids) - 1 for o in outs)
                                              / sum(o.metrics["total_s"] - o.metrics["ttft_s"] for o in outs))
        r["generate_b1_auto_over_off"] = r["generate_b1_auto_tok_s"] / r["generate_b1_off_tok_s"]
        r["greedy_identical"] = {
            "stream_c1": texts["off"][1] == texts["auto"][1], "stream_c4": texts["off"][4] == texts["auto"][4],
            "generate": gen_texts["off"] == gen_texts["auto"], "stream_vs_generate": texts["off"][1][: len(chats)] == gen_texts["off"]}
        r["prefill_ahead"] = asyncio.run(prefill_ahead(spec))
        res["formats"][fmt] = r
        plains[fmt] = plain
        print(f"stream {fmt}: " + json.dumps(r), flush=True)
    if "fp32" in plains:  # the other half of the voice default's choice: how far each format drifts
        from benchmarks.llm_engine import greedy_agreement

        for fmt, e in plains.items():
            if fmt != "fp32":
                res["formats"][fmt]["greedy_vs_fp32"] = greedy_agreement(plains["fp32"], e, max_tokens)
        res["fp32_nll_per_token"] = fp32_nll(plains["fp32"], plains, max_tokens)
    return res


def stream_table(res: dict[str, Any]) -> str:
    lines = ["| format | clients | spec | TTFT ms | first clause ms | decode tok/s | acceptance | tokens/pass |",
             "|---|---|---|---|---|---|---|---|"]
    for fmt, r in res["formats"].items():
        for c in (1, 4):
            for name in ("off", "auto"):
                s = r[f"stream_c{c}_{name}"]
                lines.append(f"| {fmt} | {c} | {name} | {s['ttft_ms']:.1f} | {s['first_clause_ms']:.1f} | "
                             f"{s['decode_tok_s']:.1f} | {s['acceptance']:.2f} | {s['tokens_per_pass']:.2f} |")
        pa = r["prefill_ahead"]
        lines.append(f"\n{fmt}: auto/off decode c1 {r['stream_c1_auto_over_off']:.2f}x, c4 "
                     f"{r['stream_c4_auto_over_off']:.2f}x; generate() b1 {r['generate_b1_off_tok_s']:.1f} -> "
                     f"{r['generate_b1_auto_tok_s']:.1f} tok/s ({r['generate_b1_auto_over_off']:.2f}x); greedy "
                     f"identical {r['greedy_identical']}; {pa['prompt_tokens']}-token TTFT cold "
                     f"{pa['ttft_cold_ms']:.1f} ms, prefilled ahead {pa['ttft_prefilled_ms']:.1f} ms "
                     f"({pa['prefilled_over_cold']:.2f}, {pa['cached_tokens']:.0f} tokens cached), after the "
                     f"turn detector's score {pa['ttft_after_score_ms']:.1f} ms ({pa['after_score_over_cold']:.2f}, "
                     f"{pa['after_score_cached_tokens']:.0f} cached)")
        if "greedy_vs_fp32" in r:
            g = r["greedy_vs_fp32"]
            lines.append(f"{fmt} vs fp32 greedy: {g['identical']}/{g['prompts']} identical, tokens before "
                         f"divergence {g['tokens_before_divergence']}")
        lines.append("")
    if "fp32_nll_per_token" in res:
        lines.append("greedy replies' NLL per token under fp32: " + ", ".join(
            f"{k} {v:.3f}" for k, v in res["fp32_nll_per_token"].items()))
    return "\n".join(lines)
