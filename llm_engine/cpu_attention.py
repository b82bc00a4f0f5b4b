"""CPU attention: our C++ paged kernel (kernels.cpu_ops.paged_attention, reads the blocks in
place) for every step where it builds, prefill included, so that a query row's output does not
depend on how many rows share the step (its sums run in the same order at any width); else,
for decode and speculative-verify steps (few query rows per sequence), torch's fused SDPA
over gathered K/V. Prefill without the kernel, and CUDA, take the kernels' dispatch.

SDPA path, measured here, 1 thread, SmolLM2 shapes (9 q / 3 kv heads, D 64),
per layer: kernels' torch reference 290 us at 64 cached tokens, 630 us at 300, 2870 us at
1000; this path 98, 253 and 827 us: 6-60 ms saved per decoded token over 30 layers. At batch 8
(33-90 cached tokens): ref 2250 us per layer, a per-sequence SDPA loop 1160 us, one padded and
masked SDPA call 410 us. The C++ kernel skips the gather: see benchmarks/llm_engine.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import cpu_ops
from kernels._dispatch import use_cpu_native
from kernels.prefill_attention import gather_kv
from llm_engine.attention_metadata import AttentionMetadata
from llm_engine.speculative.verify_attention import MAX_VERIFY_QUERIES, sdpa_verify_attention


def cpu_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                  scale: float, backend: str = "auto") -> torch.Tensor | None:
    """q [T, Hq, D] -> [T, Hq, D]; None when neither the C++ kernel nor SDPA takes the step
    (a prefill without the kernel). backend "torch" keeps to torch ops (SDPA)."""
    if not meta.seq_lens:
        return None
    if use_cpu_native(backend, q, k_cache, v_cache):
        return cpu_ops.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.cu_seqlens_q,
                                       meta.context_lens, scale)
    if q.shape[0] > MAX_VERIFY_QUERIES * len(meta.seq_lens):
        return None
    if meta.is_decode:
        return sdpa_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)
    return sdpa_verify_attention(q, k_cache, v_cache, meta.block_tables, meta.cu_seqlens_q.tolist(),
                                 meta.seq_lens, scale)


def sdpa_decode_attention(
    q: torch.Tensor,  # [B, Hq, D]
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [B, MB] int32
    seq_lens: tuple[int, ...],  # host copy of context_lens (no device sync per layer)
    scale: float,
) -> torch.Tensor:  # [B, Hq, D]
    if len(seq_lens) > 1:
        return _batched(q, k_cache, v_cache, block_tables, seq_lens, scale)
    out = torch.empty_like(q)
    for b, ctx in enumerate(seq_lens):
        k = gather_kv(k_cache, block_tables[b], ctx).transpose(0, 1)[None]  # [1, Hk, ctx, D]
        v = gather_kv(v_cache, block_tables[b], ctx).transpose(0, 1)[None]
        o = F.scaled_dot_product_attention(q[b : b + 1, :, None, :], k, v, scale=scale, enable_gqa=True)
        out[b] = o[0, :, 0]
    return out


def _batched(q, k_cache, v_cache, block_tables, seq_lens, scale):
    """One SDPA call for the whole decode batch: keys padded to the longest sequence, the
    padding masked (measured above: 2.8x faster than a loop at batch 8)."""
    bs = k_cache.shape[1]
    n_blocks = -(-max(seq_lens) // bs)
    tables = block_tables[:, :n_blocks].long()  # [B, nb]
    k = k_cache[tables].flatten(1, 2).transpose(1, 2)  # [B, Hk, nb*BS, D]
    v = v_cache[tables].flatten(1, 2).transpose(1, 2)
    lens = torch.tensor(seq_lens, device=q.device)
    mask = torch.arange(k.shape[2], device=q.device)[None, :] < lens[:, None]  # [B, L]
    o = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=mask[:, None, None, :],
                                       scale=scale, enable_gqa=True)
    return o[:, :, 0]
