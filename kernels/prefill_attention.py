"""Paged causal attention for variable-length query runs against the paged KV cache.

Covers prefill, chunked prefill over cached prefix blocks, and speculative verification
(k+1 queries): sequence b has q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b] new queries at
positions context_lens[b] - q_len_b ... context_lens[b] - 1, whose keys/values are already
stored in the cache; each query attends to every cached position up to its own.

The kernel packs the G = Hq/Hk query heads sharing a KV head into the rows of one tile
(row r = query r // G, head r % G): a verify step with 4 queries and G = 4 fills a 16-row
tile and reads each key once, instead of launching 16 mostly empty programs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._attention_tile import LOG2E, M_INIT, _attend_tile
from kernels._dispatch import use_triton
from kernels._triton import check, next_pow2, tl, triton, upcast_for_interpreter


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


@dataclass(frozen=True)
class TileConfig:
    block_n: int
    block_d: int
    dot_prec: str
    num_stages: int


def tile_config(q: torch.Tensor, block_size: int, head_dim: int) -> TileConfig:
    # 64 keys x 128 dims x 2 B = 16 KiB per K or V tile; 3 stages of K+V = 96 KiB of the
    # H100/H200's 228 KiB shared memory, leaving room for two programs per SM.
    block_d = next_pow2(head_dim, 16)
    block_n = max(64 if block_d <= 128 else 32, block_size)
    # fp32 inputs get exact products (the tests compare fp32 at 1e-4); fp16/bf16 ignore it.
    dot_prec = "ieee" if q.dtype == torch.float32 else "tf32"
    return TileConfig(block_n, block_d, dot_prec, num_stages=3 if block_d <= 128 else 2)


def check_paged_args(op, q, k_cache, v_cache, block_tables, context_lens) -> None:
    check(q.dim() == 3, f"{op}: q must be [T, Hq, D], got {tuple(q.shape)}")
    check(k_cache.dim() == 4 and k_cache.shape == v_cache.shape,
          f"{op}: caches must both be [NB, BS, Hk, D], got {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    _, bs, hk, d = k_cache.shape
    check(q.shape[2] == d, f"{op}: head dim of q ({q.shape[2]}) != cache head dim ({d})")
    check(q.shape[1] % hk == 0, f"{op}: Hq={q.shape[1]} is not a multiple of Hk={hk}")
    check(bs & (bs - 1) == 0, f"{op}: block size must be a power of two, got {bs}")
    check(q.dtype == k_cache.dtype == v_cache.dtype and q.dtype in (torch.float32, torch.float16, torch.bfloat16),
          f"{op}: q/cache dtypes {q.dtype}/{k_cache.dtype}/{v_cache.dtype} unsupported or mixed")
    check(q.stride(2) == 1 and k_cache.stride(3) == 1 and k_cache.stride() == v_cache.stride(),
          f"{op}: head dims must be contiguous and both caches share one layout")
    check(block_tables.dim() == 2 and block_tables.dtype in (torch.int32, torch.int64)
          and block_tables.stride(1) == 1, f"{op}: block_tables must be [B, MB] int32/int64, row-contiguous")
    check(context_lens.shape == (block_tables.shape[0],) and not context_lens.is_floating_point(),
          f"{op}: context_lens must be [B] int, B = {block_tables.shape[0]}")


@triton.jit
def _prefill_attention_kernel(
    q_ptr, k_cache, v_cache, bt_ptr, cu_ptr, ctx_ptr, out_ptr,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_ot, stride_oh,
    qk_scale, D, G,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr,
):
    mblk = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    kvh = tl.program_id(2)
    q_start = tl.load(cu_ptr + b)
    q_len = tl.load(cu_ptr + b + 1) - q_start
    r0 = mblk * BLOCK_M
    if r0 < q_len * G:
        ctx = tl.load(ctx_ptr + b)
        offs_r = r0 + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        qi = offs_r // G  # [BLOCK_M] query index within the sequence
        heads = kvh * G + offs_r % G
        rmask = offs_r < q_len * G
        qmask = rmask[:, None] & (offs_d < D)[None, :]
        tok = (q_start + qi).to(tl.int64)
        q = tl.load(q_ptr + tok[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=qmask, other=0.0)
        q_pos = ctx - q_len + qi
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], M_INIT, dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        bt_row = bt_ptr + b * stride_bt
        head_off = kvh.to(tl.int64) * stride_ch
        # Keys at or before the tile's first query are visible to every row: no masks there.
        first_pos = ctx - q_len + r0 // G
        last_pos = tl.minimum(ctx - q_len + (r0 + BLOCK_M - 1) // G, ctx - 1)
        kv_end = last_pos + 1
        n_full = (first_pos + 1) // BLOCK_N
        for i in range(0, n_full):
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k_cache, v_cache, bt_row, i * BLOCK_N,
                                         head_off, stride_cb, stride_cs, q_pos, kv_end, qk_scale, D,
                                         BLOCK_N, BLOCK_D, BLOCK_SIZE, False, False, EVEN_D, DOT_PREC)
        for start in range(n_full * BLOCK_N, kv_end, BLOCK_N):
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k_cache, v_cache, bt_row, start,
                                         head_off, stride_cb, stride_cs, q_pos, kv_end, qk_scale, D,
                                         BLOCK_N, BLOCK_D, BLOCK_SIZE, True, True, EVEN_D, DOT_PREC)
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(out_ptr + tok[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=qmask)


def _prefill_attention_triton(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale, max_q_len):
    check_paged_args("prefill_attention", q, k_cache, v_cache, block_tables, context_lens)
    check(cu_seqlens_q.shape == (block_tables.shape[0] + 1,) and not cu_seqlens_q.is_floating_point(),
          "prefill_attention: cu_seqlens_q must be [B+1] int")
    if upcast_for_interpreter(q.dtype):
        out = _prefill_attention_triton(q.float(), k_cache.float(), v_cache.float(), block_tables,
                                        cu_seqlens_q, context_lens, scale, max_q_len)
        return out.to(q.dtype)
    T, Hq, D = q.shape
    _, BS, Hk, _ = k_cache.shape
    B = block_tables.shape[0]
    out = torch.empty_like(q)
    if T == 0 or B == 0:
        return out
    if max_q_len is None:  # one host sync; the engine passes it to avoid that
        max_q_len = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item())
    cfg = tile_config(q, BS, D)
    G = Hq // Hk
    rows = max_q_len * G
    # 64-row tiles for prompts (4 warps, Hopper's mma tile); 16 rows for verify/decode-sized runs.
    block_m = 64 if rows > 32 else max(16, next_pow2(rows))
    grid = (triton.cdiv(max(rows, 1), block_m), B, Hk)
    _prefill_attention_kernel[grid](
        q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, out,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        float(scale) * LOG2E, D, G,
        BLOCK_M=block_m, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d, BLOCK_SIZE=BS,
        EVEN_D=cfg.block_d == D, DOT_PREC=cfg.dot_prec, num_warps=4, num_stages=cfg.num_stages,
    )
    return out


def prefill_attention(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale, *,
                      backend: str = "auto", max_q_len: int | None = None):
    """`max_q_len`: the longest query run in the batch, if the caller knows it (saves a sync)."""
    if use_triton(q, backend):
        return _prefill_attention_triton(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens,
                                         scale, max_q_len)
    return prefill_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, context_lens, scale)
