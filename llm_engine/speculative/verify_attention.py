"""CPU attention for speculative verification (a few query tokens per sequence) with torch's
fused SDPA, beside cpu_attention's decode path. Measured here, 1 thread, SmolLM2-135M, 120
cached tokens: a 6-token verify pass took 112 ms through kernels' prefill reference vs 60 ms for
a 1-token decode; the reference's per-layer gather/upcast/einsum is what this replaces."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.prefill_attention import gather_kv

MAX_VERIFY_QUERIES = 17  # k + 1 for k <= 16 (SpeculativeConfig.num_tokens bound)


def sdpa_verify_attention(
    q: torch.Tensor,  # [T, Hq, D], sequences concatenated
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [B, MB] int32
    cu: list[int],  # host cu_seqlens_q [B+1]
    seq_lens: tuple[int, ...],  # host context_lens [B]
    scale: float,
) -> torch.Tensor:  # [T, Hq, D]
    out = torch.empty_like(q)
    for b, ctx in enumerate(seq_lens):
        n = cu[b + 1] - cu[b]
        if n == 0:
            continue
        k = gather_kv(k_cache, block_tables[b], ctx).transpose(0, 1)[None]  # [1, Hk, ctx, D]
        v = gather_kv(v_cache, block_tables[b], ctx).transpose(0, 1)[None]
        qb = q[cu[b] : cu[b + 1]].transpose(0, 1)[None]  # [1, Hq, n, D]
        mask = torch.arange(ctx)[None, :] <= torch.arange(ctx - n, ctx)[:, None]  # [n, ctx]
        o = F.scaled_dot_product_attention(qb, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        out[cu[b] : cu[b + 1]] = o[0].transpose(0, 1)
    return out
