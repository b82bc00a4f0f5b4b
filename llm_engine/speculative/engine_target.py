"""The `Target` protocol over the engine's own model, paged KV cache and block manager.

extend() runs ONE forward with the new tokens (k+1 verify queries) through the engine's
ModelRunner metadata (paged attention via kernels.prefill_attention), returning pre-norm
features and logits for every new token; truncate() is BlockManager.truncate (rejected
slots' blocks freed, copy-on-write of a shared tail block); release() frees every block.
Full blocks are committed to the prefix cache as they fill, so later turns still hit.
"""

from __future__ import annotations

import torch

from llm_engine.sampling_params import SamplingParams
from llm_engine.scheduler import ScheduledBatch
from llm_engine.sequence import Sequence


class EngineTarget:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.vocab_size = engine.model.cfg.vocab_size
        self._seqs: dict[str, Sequence] = {}

    def embed_weight(self) -> torch.Tensor:
        return self.engine.model.embed_tokens.weight

    def lm_head_weight(self) -> torch.Tensor:
        return self.engine.model.lm_head.weight

    def norm(self) -> tuple[torch.Tensor, float]:
        return self.engine.model.norm, self.engine.model.cfg.rms_norm_eps

    def extend(self, seq_id: str, token_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        bm = self.engine.bm
        seq = self._seqs.get(seq_id)
        if seq is None:
            seq = self._seqs[seq_id] = Sequence(seq_id, list(token_ids), SamplingParams())
            bm.match_prefix(seq)
            if seq.num_computed_tokens >= len(seq.token_ids):  # keep >= 1 token to compute
                self.engine.kv.copy_blocks(bm.truncate(seq, len(seq.token_ids) - 1))
                seq.token_ids = list(token_ids)
        else:
            seq.token_ids.extend(token_ids)
        n_new = len(seq.token_ids) - seq.num_computed_tokens
        if not bm.allocate(seq, len(seq.token_ids)):
            raise RuntimeError("KV cache full during speculative verification")
        runner = self.engine.runner
        ids, meta, _, _ = runner.prepare(ScheduledBatch([seq], [n_new]))
        normed, prenorm = self.engine.model(ids, meta, self.engine.kv.layers, return_prenorm=True)
        seq.num_computed_tokens += n_new
        bm.commit_full_blocks(seq)
        n = len(token_ids)  # a prefix hit computed fewer rows than asked: pad from the front
        logits = self.engine.model.compute_logits(normed[-n:] if normed.shape[0] >= n else normed)
        return prenorm[-n:], logits  # [n, H], [n, V]

    def truncate(self, seq_id: str, length: int) -> None:
        seq = self._seqs[seq_id]
        if length < len(seq.token_ids):
            self.engine.kv.copy_blocks(self.engine.bm.truncate(seq, length))

    def release(self, seq_id: str) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is not None:
            self.engine.bm.free_seq(seq)

    def length(self, seq_id: str) -> int:
        seq = self._seqs.get(seq_id)
        return 0 if seq is None else len(seq.token_ids)
