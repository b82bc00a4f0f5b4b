"""LLMEngine.generate with speculation: the hook the engine calls when built with
`speculative=SpeculativeConfig(...)`. Requests whose sampling the acceptance rule does not
cover exactly here (top-k/p, min-p, repetition penalty, stop strings) take the plain path."""

from __future__ import annotations

from llm_engine.outputs import RequestOutput
from llm_engine.sampling_params import SamplingParams
from llm_engine.speculative.config import SpecMetrics, SpeculativeConfig
from llm_engine.speculative.engine_target import EngineTarget
from llm_engine.speculative.factory import build_drafter
from llm_engine.speculative.verifier import SpecRequest, SpeculativeDecoder


def speculation_applies(p: SamplingParams) -> bool:
    return (p.top_k in (0, -1) and p.top_p == 1.0 and p.min_p == 0.0 and p.repetition_penalty == 1.0
            and not p.stop)


def generate_speculative(engine, cfg: SpeculativeConfig, prompts: list[list[int]],
                         params: list[SamplingParams]) -> tuple[list[RequestOutput], SpecMetrics]:
    target = EngineTarget(engine)
    temp = params[0].temperature
    drafter = build_drafter(cfg, target, temperature=temp)
    dec = SpeculativeDecoder(target, drafter, k_max=cfg.num_tokens, adaptive=cfg.adaptive,
                             draft_cost=0.0 if drafter.name == "ngram" else 0.05)
    reqs = []
    for ids, p in zip(prompts, params):
        stops = tuple(p.stop_token_ids) + (() if p.ignore_eos else tuple(engine.eos_token_ids))
        reqs.append(SpecRequest(f"spec-{next(engine._ids)}", ids, p.max_tokens, p.temperature,
                                p.seed or 0, stops))
    dec.generate(reqs)
    outs = []
    for r, p in zip(reqs, params):
        hit_stop = bool(r.output) and r.output[-1] in r.stop_ids
        toks = r.output[:-1] if hit_stop and r.output[-1] not in p.stop_token_ids else r.output
        m = dec.metrics.per_request[r.seq_id]
        outs.append(RequestOutput(r.seq_id, r.prompt, toks, engine.tokenizer.decode(toks),
                                  "stop" if hit_stop else "length", metrics=m.as_dict()))
    return outs, dec.metrics
