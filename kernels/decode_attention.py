"""Paged decode attention: one query token per sequence, GQA, over block tables."""

from __future__ import annotations

import torch

from kernels._dispatch import use_triton
from kernels.prefill_attention import prefill_attention_ref


def decode_attention_ref(
    q: torch.Tensor,  # [B, Hq, D]
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,  # [NB, BS, Hk, D]
    block_tables: torch.Tensor,  # [B, MB] int32
    context_lens: torch.Tensor,  # [B] int32, including the current token
    scale: float,
) -> torch.Tensor:  # [B, Hq, D]
    cu = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    return prefill_attention_ref(q, k_cache, v_cache, block_tables, cu, context_lens, scale)


def decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, *, backend: str = "auto"):
    if use_triton(q, backend):
        raise NotImplementedError("Triton decode_attention: see the kernels issue")
    return decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale)
