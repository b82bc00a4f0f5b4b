"""Turns a scheduled batch into model inputs + AttentionMetadata, runs the model, and returns
hidden states and the logits of the rows that need a next token."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from llm_engine.attention_metadata import AttentionMetadata
from llm_engine.block_manager import BlockManager
from llm_engine.kv_cache import KVCache
from llm_engine.model import LlamaModel
from llm_engine.scheduler import ScheduledBatch


@dataclass
class StepOutput:
    hidden: torch.Tensor  # [T, H] every new token's final hidden state
    logits: torch.Tensor  # [N, V] fp32, for `sample_rows`
    sample_rows: list[int]  # index into batch.seqs of sequences whose chunk ends at their last token
    logits_indices: torch.Tensor  # [N] int64 rows of `hidden` behind `logits`
    # logits row of sample_rows[j]'s first scored token: 1 + num_draft rows from there
    logit_starts: list[int] = field(default_factory=list)
    row_starts: list[int] = field(default_factory=list)  # each sequence's first row in `hidden`
    features: torch.Tensor | None = None  # [T, H] last layer before the final norm (EAGLE input)


class ModelRunner:
    def __init__(self, model: LlamaModel, kv: KVCache, bm: BlockManager, device: torch.device,
                 graphs=None) -> None:
        self.model = model
        self.kv = kv
        self.bm = bm
        self.device = device
        self.graphs = graphs  # CudaGraphRunner or None

    def prepare(self, batch: ScheduledBatch):
        bs = self.bm.block_size
        ids, pos, slots, cu, ctx, logit_idx, sample_rows, starts = [], [], [], [0], [], [], [], []
        for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens)):
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start : start + n])
            pos.extend(range(start, start + n))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, start + n))
            cu.append(cu[-1] + n)
            ctx.append(start + n)
            if start + n == len(seq.token_ids):
                sample_rows.append(i)
                starts.append(len(logit_idx))
                logit_idx.extend(range(cu[-1] - 1 - batch.drafts(i), cu[-1]))
        max_blocks = max(len(s.block_table) for s in batch.seqs)
        tables = [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in batch.seqs]
        dev = self.device
        meta = AttentionMetadata(
            positions=torch.tensor(pos, dtype=torch.long, device=dev),
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            block_tables=torch.tensor(tables, dtype=torch.int32, device=dev),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(ctx, dtype=torch.int32, device=dev),
            is_decode=cu[-1] == len(batch.seqs),
            max_context_len=max(ctx),
            seq_lens=tuple(ctx),
        )
        return torch.tensor(ids, dtype=torch.long, device=dev), meta, logit_idx, sample_rows, starts

    def run(self, batch: ScheduledBatch, features: bool = False) -> StepOutput:
        """features: also return the pre-norm last-layer output of every row (speculation's
        head drafts from it; it costs nothing: the final norm computes it anyway)."""
        input_ids, meta, logit_idx, sample_rows, starts = self.prepare(batch)
        feats = None
        if features:
            hidden, feats = self.model(input_ids, meta, self.kv.layers, return_prenorm=True)
        elif self.graphs is not None and meta.is_decode and self.graphs.can_run(meta):
            hidden = self.graphs.run(input_ids, meta)
        else:
            hidden = self.model(input_ids, meta, self.kv.layers)
        idx = torch.tensor(logit_idx, dtype=torch.long, device=self.device)
        logits = self.model.compute_logits(hidden[idx]) if logit_idx else hidden.new_zeros(0)
        rows = [0]
        for n in batch.num_tokens[:-1]:
            rows.append(rows[-1] + n)
        return StepOutput(hidden, logits, sample_rows, idx, starts, rows, feats)
