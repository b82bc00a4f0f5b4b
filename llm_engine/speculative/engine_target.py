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
from parley.errors import KVCacheFullError


class EngineTarget:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.vocab_size = engine.model.cfg.vocab_size
        self._seqs: dict[str, Sequence] = {}

    def embed_weight(self) -> torch.Tensor:
        return self.engine.model.embed_tokens.weight

    def lm_head_weight(self) -> torch.Tensor:  # [V, D] real-valued (an int8 head dequantized)
        head = self.engine.model.lm_head
        return head.dequantized() if hasattr(head, "dequantized") else head.weight

    def norm(self) -> tuple[torch.Tensor, float]:
        return self.engine.model.norm, self.engine.model.cfg.rms_norm_eps

    def _grow(self, seq_id: str, token_ids: list[int]) -> tuple[Sequence, int]:
        """Append token_ids to the sequence (created with a prefix-cache lookup); -> (seq, n_new)."""
        bm = self.engine.bm
        seq = self._seqs.get(seq_id)
        new = seq is None
        if new:
            seq = self._seqs[seq_id] = Sequence(seq_id, list(token_ids), SamplingParams())
            self.engine.kv.copy_blocks(bm.match_prefix(seq))
            if seq.num_computed_tokens >= len(seq.token_ids):  # keep >= 1 token to compute
                self.engine.kv.copy_blocks(bm.truncate(seq, len(seq.token_ids) - 1))
                seq.token_ids = list(token_ids)
        else:
            seq.token_ids.extend(token_ids)
        if not bm.allocate(seq, len(seq.token_ids)):
            if new:  # nothing of it stays: the prefix-cache blocks it matched are unreferenced
                self.release(seq_id)
            else:
                del seq.token_ids[len(seq.token_ids) - len(token_ids):]
            raise KVCacheFullError(f"KV cache full: {len(token_ids)} more tokens for {seq_id!r} do not fit "
                                   f"({bm.num_free_blocks} free blocks)")
        return seq, len(seq.token_ids) - seq.num_computed_tokens

    def extend(self, seq_id: str, token_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.extend_batch({seq_id: token_ids})[0]

    def extend_batch(self, feeds: dict[str, list[int]], last_logits_only: bool = False
                     ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One forward over every sequence's new tokens (cu_seqlens_q per sequence); the LM head
        runs only on the rows returned ([m, V], or [1, V] with last_logits_only)."""
        before = {sid: self.length(sid) if sid in self._seqs else None for sid in feeds}
        grown = []
        try:
            for sid, toks in feeds.items():
                grown.append(self._grow(sid, toks))
        except KVCacheFullError:  # undo the sequences grown before the one that did not fit
            for sid, _ in zip(feeds, grown):
                if before[sid] is None:
                    self.release(sid)
                else:
                    self.truncate(sid, before[sid])
            raise
        seqs, n_new = [g[0] for g in grown], [g[1] for g in grown]
        ids, meta, *_ = self.engine.runner.prepare(ScheduledBatch(seqs, n_new))
        normed, prenorm = self.engine.model(ids, meta, self.engine.kv.layers, return_prenorm=True)
        outs, row = [], 0
        for seq, n, toks in zip(seqs, n_new, feeds.values()):
            seq.num_computed_tokens += n
            self.engine.bm.commit_full_blocks(seq)
            # after a prefix hit fewer rows than tokens were computed: the last rows are returned
            m = min(n, len(toks))
            sl = slice(row + n - m, row + n)
            rows = slice(row + n - 1, row + n) if last_logits_only else sl
            outs.append((prenorm[sl], self.engine.model.compute_logits(normed[rows])))  # [m, H], [m|1, V]
            row += n
        return outs

    def truncate(self, seq_id: str, length: int) -> None:
        seq = self._seqs.get(seq_id)
        if seq is None:  # nothing cached yet (a draft model's first proposal): only 0 fits
            if length:
                raise ValueError(f"cannot truncate unknown sequence {seq_id!r} to {length}")
            return
        if length < len(seq.token_ids):
            self.engine.kv.copy_blocks(self.engine.bm.truncate(seq, length))

    def release(self, seq_id: str) -> None:
        seq = self._seqs.pop(seq_id, None)
        if seq is not None:
            self.engine.bm.free_seq(seq)

    def length(self, seq_id: str) -> int:
        seq = self._seqs.get(seq_id)
        return 0 if seq is None else len(seq.token_ids)
