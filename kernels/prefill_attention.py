"""Paged causal attention for variable-length query runs against the paged KV cache.

Covers prefill, chunked prefill over cached prefix blocks, and speculative verification
(k+1 queries): sequence b has q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b] new queries at
positions context_lens[b] - q_len_b ... context_lens[b] - 1, whose keys/values are already
stored in the cache; each query attends to every cached position up to its own.
"""

from __future__ import annotations

import torch

from kernels._dispatch import use_triton


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """[NB, BS, Hk, D] + [MB] -> [length, Hk, D] for one sequence."""
    bs = cache.shape[1]
    n_blocks = (length + bs - 1) // bs
    return cache[block_table[:n_blocks].long()].reshape(-1, *cache.shape[2:])[:length]


def prefill_attention_ref(
    q: torch.Tensor,  # [T, Hq, D], sequences concatenated
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,  # [NB, BS, Hk, D]
    block_tables: torch.Tensor,  # [B, MB] int32
    cu_seqlens_q: torch.Tensor,  # [B+1] int32
    context_lens: torch.Tensor,  # [B] int32, total length including the new tokens
    scale: float,
) -> torch.Tensor:  # [T, Hq, D]
    out = torch.empty_like(q)
    hq, hk = q.shape[1], k_cache.shape[2]
    cu = cu_seqlens_q.tolist()
    for b, ctx in enumerate(context_lens.tolist()):
        qb = q[cu[b] : cu[b + 1]].float()  # [L, Hq, D]
        n_q = qb.shape[0]
        if n_q == 0:
            continue
        kb = gather_kv(k_cache, block_tables[b], ctx).float().repeat_interleave(hq // hk, dim=1)
        vb = gather_kv(v_cache, block_tables[b], ctx).float().repeat_interleave(hq // hk, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qb, kb) * scale  # [Hq, L, ctx]
        q_pos = torch.arange(ctx - n_q, ctx, device=q.device)[:, None]
        mask = torch.arange(ctx, device=q.device)[None, :] > q_pos  # [L, ctx]
        scores.masked_fill_(mask[None], float("-inf"))
        out[cu[b] : cu[b + 1]] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vb).to(q.dtype)
    return out


def prefill_attention(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale, *,
                      backend: str = "auto"):
    if use_triton(q, backend):
        raise NotImplementedError("Triton prefill_attention: see the kernels issue")
    return prefill_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale)
