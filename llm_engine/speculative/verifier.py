"""Speculative generation: draft k, verify with one k+1-token target pass, accept, roll back.

Sequences advance step by step together (continuous batching: each sequence has its own k
from its own adaptive controller, 0 meaning a plain decode step); the target sees each
sequence's k+1 query tokens against its cache, and rejected slots are truncated away.

LLMEngine does not run this loop: it speculates inside its own step (speculative/step.py),
so streaming, batching, preemption and abort apply. This loop drives any `Target` on its own:
Hugging Face models in the tests, and drafter-against-drafter studies (benchmarks/speculative.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from llm_engine.speculative.acceptance import accept_greedy, accept_sampled
from llm_engine.speculative.adaptive import AdaptiveDraftLength, StepCosts
from llm_engine.speculative.config import SpecMetrics
from llm_engine.speculative.drafter import Drafter
from llm_engine.speculative.target import Target, extend_many


@dataclass
class SpecRequest:
    seq_id: str
    prompt: list[int]
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    stop_ids: tuple[int, ...] = ()
    output: list[int] = field(default_factory=list)
    done: bool = False
    first_tokens_s: dict[int, float] = field(default_factory=dict)  # n tokens -> seconds


class SpeculativeDecoder:
    def __init__(self, target: Target, drafter: Drafter | None, k_max: int = 5,
                 adaptive: bool = True, draft_cost: float = 0.02) -> None:
        self.target, self.drafter = target, drafter
        self.k_max, self.adaptive, self.draft_cost = k_max, adaptive, draft_cost
        self.metrics = SpecMetrics()
        # measured verify / draft times, kept across generate() calls: the adaptive k's costs
        self.costs = StepCosts(draft_per_token=draft_cost)

    def generate(self, requests: list[SpecRequest], mark: tuple[int, ...] = (12,)) -> list[SpecRequest]:
        t0 = time.perf_counter()
        ctl = {r.seq_id: AdaptiveDraftLength(self.k_max, self.draft_cost, cost=self.costs.relative)
               for r in requests}
        gens = {r.seq_id: torch.Generator().manual_seed(r.seed) for r in requests}
        try:  # a full KV cache (KVCacheFullError, retryable) frees every sequence's blocks
            for r in requests:  # prefill (one prompt per forward), then the first token from the target
                [(feats, logits)] = extend_many(self.target, {r.seq_id: r.prompt}, last_logits_only=True)
                self._emit(r, [self._sample(logits[-1], r, gens[r.seq_id])], mark, t0)
                if self.drafter is not None:
                    self.drafter.accepted(r.seq_id, r.prompt + r.output, features=feats)
                self.metrics.per_request[r.seq_id] = SpecMetrics()
            while not all(r.done for r in requests):
                live = [r for r in requests if not r.done]
                drafts = [self._draft(r, ctl[r.seq_id]) for r in live]
                feeds = {r.seq_id: [(r.prompt + r.output)[-1], *d[0]] for r, d in zip(live, drafts)}
                t = time.perf_counter()
                outs = extend_many(self.target, feeds)  # ONE forward: every sequence's k+1 queries
                dt = time.perf_counter() - t
                self.metrics.verify_s += dt
                self.costs.observe_verify(max(len(d[0]) for d in drafts), dt)
                for r, (ids, probs), (feats, logits) in zip(live, drafts, outs):
                    self._accept(r, ids, probs, feats, logits, ctl[r.seq_id], gens[r.seq_id], mark, t0)
        finally:
            for r in requests:
                self.target.release(r.seq_id)
                if self.drafter is not None:
                    self.drafter.release(r.seq_id)
        return requests

    def _draft(self, r: SpecRequest, ctl: AdaptiveDraftLength) -> tuple[list[int], torch.Tensor | None]:
        if self.drafter is None:
            return [], None
        k = min(ctl.next_k() if self.adaptive else self.k_max, r.max_tokens - len(r.output) - 1)
        if k <= 0:
            return [], None
        t = time.perf_counter()
        d = self.drafter.propose(r.seq_id, r.prompt + r.output, k)
        dt = time.perf_counter() - t
        self.metrics.draft_s += dt
        self.costs.observe_draft(k, dt)
        return d.token_ids[:k], d.probs

    def _accept(self, r, draft_ids, probs, feats, logits, ctl, gen, mark, t0) -> None:
        # feats [k+1, D], logits [k+1, V]: row i scores the token after feed i
        k = len(draft_ids)
        n0 = len(r.prompt) + len(r.output) - 1  # cache length before this step's feed
        draft = torch.tensor(draft_ids, dtype=torch.long)
        if r.temperature == 0.0:
            acc = accept_greedy(draft, logits)
        else:
            p = torch.softmax(logits / r.temperature, -1)
            acc = accept_sampled(draft, probs[:k] if probs is not None else None, p, gen)
        self.target.truncate(r.seq_id, n0 + acc.accepted + 1)  # KV rollback of rejected slots
        if k:
            ctl.update(k, acc.accepted)
        for m in (self.metrics, self.metrics.per_request[r.seq_id]):
            m.record(k, acc.accepted, len(acc.tokens))
        kept = self._emit(r, acc.tokens, mark, t0)
        if self.drafter is not None and not r.done:
            self.drafter.accepted(r.seq_id, r.prompt + r.output, features=feats[: min(kept, acc.accepted + 1)])

    @staticmethod
    def _sample(logits: torch.Tensor, r: SpecRequest, gen) -> int:
        if r.temperature == 0.0:
            return int(logits.argmax())
        return int(torch.multinomial(torch.softmax(logits / r.temperature, -1), 1, generator=gen))

    @staticmethod
    def _emit(r: SpecRequest, tokens: list[int], mark, t0) -> int:
        n = 0
        for tok in tokens:
            r.output.append(tok)
            n += 1
            for m in mark:
                if len(r.output) == m:
                    r.first_tokens_s[m] = time.perf_counter() - t0
            if tok in r.stop_ids or len(r.output) >= r.max_tokens:
                r.done = True
                break
        return n
