"""The inner step shared by the paged attention kernels: one [BLOCK_N] tile of keys and
values gathered through the block table, folded into an online (flash) softmax.

Scores are kept in the log2 domain (q.k * scale * log2(e)) so the softmax uses exp2, one
MUFU instruction on NVIDIA GPUs instead of exp's extra multiply. Row maxima start at a
large finite negative number instead of -inf, so rows whose every key is masked in a tile
(causal padding, empty splits) give exp2(-inf) = 0, never -inf - -inf = NaN.
"""

from __future__ import annotations

from kernels._triton import tl, triton

LOG2E = 1.4426950408889634
M_INIT = tl.constexpr(-1.0e30)


@triton.jit
def _load_kv_tile(cache_ptr, rows, offs_n, offs_d, kv_len, D,
                  MASK_N: tl.constexpr, EVEN_D: tl.constexpr):
    ptrs = cache_ptr + rows[:, None] + offs_d[None, :]  # [BLOCK_N, BLOCK_D]
    if MASK_N:
        if EVEN_D:
            return tl.load(ptrs, mask=(offs_n < kv_len)[:, None], other=0.0)
        return tl.load(ptrs, mask=(offs_n < kv_len)[:, None] & (offs_d < D)[None, :], other=0.0)
    if EVEN_D:
        return tl.load(ptrs)
    return tl.load(ptrs, mask=(offs_d < D)[None, :], other=0.0)


@triton.jit
def _attend_tile(
    acc, m_i, l_i, q,  # [M, BLOCK_D] fp32, [M], [M], [M, BLOCK_D] input dtype
    k_cache, v_cache, bt_ptr, start, head_off, stride_cb, stride_cs,
    q_pos, kv_len, qk_scale, D,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    MASK_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr,
):
    offs_n = start + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    # A tile may span several cache blocks: each key row looks up its own physical block.
    if MASK_N:
        blk = tl.load(bt_ptr + offs_n // BLOCK_SIZE, mask=offs_n < kv_len, other=0)
    else:
        blk = tl.load(bt_ptr + offs_n // BLOCK_SIZE)
    rows = blk.to(tl.int64) * stride_cb + (offs_n % BLOCK_SIZE) * stride_cs + head_off  # [BLOCK_N]
    k = _load_kv_tile(k_cache, rows, offs_n, offs_d, kv_len, D, MASK_N, EVEN_D)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale  # [M, BLOCK_N], log2 domain
    if MASK_N:
        s = tl.where((offs_n < kv_len)[None, :], s, float("-inf"))
    if CAUSAL:
        s = tl.where(offs_n[None, :] <= q_pos[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = _load_kv_tile(v_cache, rows, offs_n, offs_d, kv_len, D, MASK_N, EVEN_D)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
    return acc, m_new, l_i
