"""The per-step attention metadata passed explicitly to the model forward (never a global)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionMetadata:
    """A flattened batch of B sequences with T new query tokens in all.

    Sequence b owns tokens cu_seqlens_q[b]:cu_seqlens_q[b+1] (a prefill chunk, one decode
    token, or k+1 speculative-verify tokens) at positions context_lens[b]-q_len_b ...
    context_lens[b]-1. Their keys/values are written at slot_mapping before attention runs.
    """

    positions: torch.Tensor  # [T] int64
    slot_mapping: torch.Tensor  # [T] int64, block * block_size + offset
    block_tables: torch.Tensor  # [B, MB] int32
    cu_seqlens_q: torch.Tensor  # [B+1] int32
    context_lens: torch.Tensor  # [B] int32, total tokens in cache after this step
    is_decode: bool  # every sequence has exactly one new token
    max_context_len: int
    seq_lens: tuple[int, ...] = ()  # host copy of context_lens, for CPU paths

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.context_lens.shape[0])
