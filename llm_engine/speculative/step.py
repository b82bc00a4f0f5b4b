"""Speculation inside the engine step: the one generation loop drafts, verifies and rolls back.

Each step, before scheduling, every decoding sequence that speculates gets k draft tokens
appended to its token ids (k from its AdaptiveDraftLength, asked batch-aware: see adaptive.py;
capped by max_tokens, the context and the free blocks, so a draft never preempts anyone). The
scheduler then treats them as a (1 + k)-token chunk, batched with prefill chunks and plain
decodes of other requests; the model runner scores all 1 + k rows. After the pass each
sequence accepts a prefix of its draft (greedy: argmax; sampled: the rejection rule against
the very distribution plain sampling would use, repetition penalty and top-k/top-p/min-p
included), its KV is truncated to the accepted tokens, and the accepted tokens go through
LLMEngine._append one by one, so stop tokens, stop strings, max_tokens and streaming behave
exactly as in plain decoding and token_ids are the same.

Drafts are always greedy point masses (q one-hot): the acceptance rule is then exact for any
target distribution with no draft probabilities. The one promise speculation cannot keep is
a seed's "same seed, same sample" (the random draws depend on how many tokens each pass
accepted, which depends on timing through the adaptive k), so seeded sampled requests decode
plainly, alone; prefill-only sequences never draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from kernels.cpu_gemv import MAX_ROWS
from llm_engine.outputs import RequestOutput
from llm_engine.sampling_params import SamplingParams
from llm_engine.scheduler import ScheduledBatch, Scheduler
from llm_engine.sequence import Sequence
from llm_engine.speculative.acceptance import accept_greedy, accept_sampled
from llm_engine.speculative.adaptive import AdaptiveDraftLength, StepCosts
from llm_engine.speculative.config import SpecMetrics, SpeculativeConfig
from llm_engine.speculative.engine_target import EngineTarget
from llm_engine.speculative.factory import build_drafter


@dataclass(eq=False)
class _SeqState:
    ctl: AdaptiveDraftLength
    metrics: SpecMetrics
    preemptions: int
    draft: int = 0  # draft tokens currently appended to the sequence's token ids


def speculation_applies(p: SamplingParams) -> bool:
    """Greedy, or sampled without a seed (see the module doc)."""
    return p.greedy or p.seed is None


class StepSpeculator:
    def __init__(self, engine, cfg: SpeculativeConfig) -> None:
        self.engine, self.cfg = engine, cfg
        self.drafter = build_drafter(cfg, EngineTarget(engine), temperature=0.0, load_model=self._load_draft)
        self.wants_features = self.drafter.name in ("head", "head+ngram")
        # an n-gram lookup costs nothing next to a pass; a head or draft model step does
        self.costs = StepCosts(draft_per_token=0.0 if self.drafter.name == "ngram" else 0.05)
        self.metrics = SpecMetrics()
        self.seqs: dict[Sequence, _SeqState] = {}
        # CPU: the matmul kernels stream the weights once per 8 rows (kernels.cpu_gemv.MAX_ROWS),
        # so a step of 9 rows costs about two of 8: drafts only fill the rows the batch's own
        # weight pass already pays for (7 at batch 1, 4 at batch 4, none at batch 8)
        self.rows_per_pass = MAX_ROWS if engine.device.type == "cpu" else None

    def _load_draft(self, path: str) -> EngineTarget:
        """A draft model loads through the engine's own loader, format and cache size."""
        cfg = self.engine.config
        draft = type(self.engine).from_pretrained(
            path, weight_format=cfg.weight_format, num_threads=None, max_cache_tokens=cfg.max_cache_tokens,
            block_size=cfg.block_size, device=cfg.device, dtype=cfg.dtype)
        if draft.model.cfg.vocab_size != self.engine.model.cfg.vocab_size:
            raise ValueError(f"draft model {path} has vocabulary {draft.model.cfg.vocab_size}, "
                             f"the target {self.engine.model.cfg.vocab_size}: they must share a tokenizer")
        return EngineTarget(draft)

    def _state(self, seq: Sequence) -> _SeqState | None:
        st = self.seqs.get(seq)
        if st is None and not seq.prefill_only and speculation_applies(seq.params):
            ctl = AdaptiveDraftLength(self.cfg.num_tokens, self.costs.prior_draft, cost=self.costs.relative)
            st = self.seqs[seq] = _SeqState(ctl, SpecMetrics(), seq.num_preemptions)
        return st

    # ---- before the pass ---------------------------------------------------------------
    def plan(self, running: list[Sequence]) -> None:
        """Append drafts to the decoding sequences that speculate."""
        eng, bm = self.engine, self.engine.bm
        decoding = [s for s in running if s.num_uncomputed == 1 and not s.prefill_only]
        tracked = [(s, st) for s in decoding if (st := self._state(s)) is not None]
        if not tracked:
            return
        # blocks no plain step needs: a draft takes only these, so it never preempts anyone
        pool = bm.num_free_blocks - sum(bm.blocks_needed(s, len(s)) for s in running)
        tokens, rows = float(len(decoding)), len(decoding)
        per = self.rows_per_pass
        max_rows = None if per is None else -(-rows // per) * per
        for seq, st in tracked:
            cap = min(self.cfg.num_tokens, seq.params.max_tokens - seq.num_output_tokens - 1,
                      eng.token_limit - len(seq) - 1, (max_rows - rows) if max_rows else self.cfg.num_tokens)
            if cap <= 0:
                continue
            if self.cfg.adaptive:
                k = min(cap, st.ctl.next_k(tokens - 1.0, lambda j, r=rows: self.costs.step_relative(r, j)))
            else:
                k = cap
            extra = bm.blocks_needed(seq, len(seq) + k) - bm.blocks_needed(seq, len(seq))
            while k > 0 and extra > pool:
                k -= 1
                extra = bm.blocks_needed(seq, len(seq) + k) - bm.blocks_needed(seq, len(seq))
            if k <= 0:
                continue
            t = time.perf_counter()
            ids = self.drafter.propose(seq.request_id, seq.token_ids, k).token_ids[:k]
            dt = time.perf_counter() - t
            self.metrics.draft_s += dt
            self.costs.observe_draft(k, dt)
            if not ids:
                continue
            pool -= bm.blocks_needed(seq, len(seq) + len(ids)) - bm.blocks_needed(seq, len(seq))
            seq.token_ids.extend(ids)
            st.draft = len(ids)
            tokens += st.ctl.expected(len(ids)) - 1.0
            rows += len(ids)

    def fit(self, batch: ScheduledBatch, scheduler: Scheduler) -> None:
        """After scheduling: a sequence preempted (or cut by the token budget) keeps only the
        drafts its chunk covers; a recomputed sequence's drafter state starts over."""
        index = {seq: i for i, seq in enumerate(batch.seqs)}
        num_draft = [0] * len(batch.seqs)
        for seq, st in self.seqs.items():
            preempted = seq.num_preemptions != st.preemptions
            if preempted:  # its KV is recomputed: features arrive again from the start
                st.preemptions = seq.num_preemptions
                self.drafter.release(seq.request_id)
            if not st.draft:
                continue
            i = index.get(seq)
            keep = 0 if i is None or preempted else min(st.draft, batch.num_tokens[i] - 1)
            if keep < st.draft:
                del seq.token_ids[len(seq.token_ids) - (st.draft - keep):]
                st.draft = keep
            if i is not None:
                batch.num_tokens[i] = min(batch.num_tokens[i], seq.num_uncomputed)
                num_draft[i] = keep
        batch.num_draft = num_draft

    # ---- after the pass ----------------------------------------------------------------
    def observe(self, seq: Sequence, features: torch.Tensor) -> None:
        """Target features of rows computed without drafts (prefill chunks, plain decodes)."""
        if self._state(seq) is not None:
            self.drafter.accepted(seq.request_id, seq.token_ids, features=features)

    def verify(self, seq: Sequence, logits: torch.Tensor, features: torch.Tensor | None
               ) -> list[RequestOutput | None]:
        """logits [k+1, V] for the sequence's last verified token and its k drafts."""
        eng, st = self.engine, self.seqs[seq]
        k, st.draft = st.draft, 0
        n0 = len(seq.token_ids) - k
        draft = torch.tensor(seq.token_ids[n0:], dtype=torch.long, device=logits.device)
        p = seq.params
        if p.greedy and p.repetition_penalty == 1.0:
            acc = accept_greedy(draft, logits)
        else:  # the distribution plain sampling would draw from, row by row
            probs = torch.stack([eng.sampler.probs(logits[i], p, seq.token_ids[: n0 + i]) for i in range(k + 1)])
            acc = accept_greedy(draft, probs) if p.greedy else accept_sampled(draft, None, probs)
        eng.kv.copy_blocks(eng.bm.truncate(seq, n0 + acc.accepted))  # KV rollback of rejected slots
        eng.bm.commit_full_blocks(seq)
        del seq.token_ids[n0:]
        kept, reason = 0, None
        for tok in acc.tokens:
            kept += 1
            reason = eng._emit(seq, tok)
            if reason is not None:
                break
        st.ctl.update(k, acc.accepted)
        self.record(seq, k, acc.accepted, kept)
        if reason is not None:
            return [eng._finish(seq, reason)]
        if features is not None:
            self.drafter.accepted(seq.request_id, seq.token_ids, features=features[: acc.accepted + 1])
        return []

    def record(self, seq: Sequence, drafted: int, accepted: int, emitted: int) -> None:
        st = self.seqs.get(seq)
        if st is not None:
            st.metrics.record(drafted, accepted, emitted)
            self.metrics.record(drafted, accepted, emitted)

    def observe_step(self, batch: ScheduledBatch, seconds: float) -> None:
        """Time a step that only decoded / verified: the cost of its total row count."""
        if all(n == 1 + batch.drafts(i) for i, n in enumerate(batch.num_tokens)):
            self.costs.observe_verify(sum(batch.num_tokens) - 1, seconds)

    def request_metrics(self, seq: Sequence) -> dict[str, float] | None:
        st = self.seqs.get(seq)
        if st is None:
            return None
        m = st.metrics
        return {"drafted": float(m.drafted), "accepted": float(m.accepted), "passes": float(m.passes),
                "tokens_per_pass": m.mean_accepted_length}

    def release(self, seq: Sequence) -> None:
        if self.seqs.pop(seq, None) is not None:
            self.drafter.release(seq.request_id)
