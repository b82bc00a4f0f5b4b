"""Paged decode attention: one query token per sequence, GQA, over block tables.

Each program serves one (sequence, KV head) pair and all Hq/Hk query heads that share it,
so every key/value byte is read once per step (decode is bound by reading the cache). For
long contexts with few (sequence, head) pairs the context is split across programs
(flash-decoding) and a reduction kernel merges the partial softmaxes.
"""

from __future__ import annotations

import torch

from kernels._attention_tile import LOG2E, M_INIT, _attend_tile
from kernels._dispatch import use_triton
from kernels._triton import tl, triton, upcast_for_interpreter
from kernels.prefill_attention import check_paged_args, prefill_attention_ref, tile_config

# H100/H200 streaming multiprocessors: the split heuristic's target when no device is queried.
_DEFAULT_SMS = 132
# A split shorter than this spends more on its partial write and the reduction than it
# saves; 256 tokens = 4 tiles of 64.
_MIN_SPLIT_TOKENS = 256
_MAX_SPLITS = 64


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


@triton.jit
def _decode_attention_kernel(
    q_ptr, k_cache, v_cache, bt_ptr, ctx_ptr, out_ptr, part_ptr, lse_ptr,
    stride_qb, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt, stride_ob, stride_oh,
    qk_scale, D, G, split_len,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    ctx = tl.load(ctx_ptr + b)
    start = split * split_len
    end = tl.minimum(start + split_len, ctx)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    heads = kvh * G + offs_g  # [BLOCK_G] query heads of this KV head
    qmask = (offs_g < G)[:, None] & (offs_d < D)[None, :]
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=qmask, other=0.0)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_G], M_INIT, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    bt_row = bt_ptr + b * stride_bt
    head_off = kvh.to(tl.int64) * stride_ch
    # Full tiles need no mask (the hot loop); the ragged tail is done once with masks.
    n_full = tl.maximum(end - start, 0) // BLOCK_N
    for i in range(0, n_full):
        acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k_cache, v_cache, bt_row, start + i * BLOCK_N,
                                     head_off, stride_cb, stride_cs, offs_g, end, qk_scale, D,
                                     BLOCK_N, BLOCK_D, BLOCK_SIZE, False, False, EVEN_D, DOT_PREC)
    tail = start + n_full * BLOCK_N
    if tail < end:
        acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k_cache, v_cache, bt_row, tail,
                                     head_off, stride_cb, stride_cs, offs_g, end, qk_scale, D,
                                     BLOCK_N, BLOCK_D, BLOCK_SIZE, True, False, EVEN_D, DOT_PREC)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    if NUM_SPLITS == 1:
        optr = out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(optr, out.to(out_ptr.dtype.element_ty), mask=qmask)
    else:
        # partials [B, Hq, S, BLOCK_D] fp32 and log2-sum-exp [B, Hq, S]; empty splits give -inf
        row = (b * (G * tl.num_programs(1)) + heads) * NUM_SPLITS + split  # [BLOCK_G]
        tl.store(part_ptr + row[:, None] * BLOCK_D + offs_d[None, :], out, mask=(offs_g < G)[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(lse_ptr + row, lse, mask=offs_g < G)


@triton.jit
def _decode_reduce_kernel(
    part_ptr, lse_ptr, out_ptr, stride_ob, stride_oh, Hq, D,
    NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    row = (b * Hq + h) * NUM_SPLITS + offs_s  # [BLOCK_S]
    lse = tl.load(lse_ptr + row, mask=offs_s < NUM_SPLITS, other=float("-inf"))
    m = tl.maximum(tl.max(lse, axis=0), M_INIT)
    w = tl.exp2(lse - m)  # [BLOCK_S], 0 for empty splits
    part = tl.load(part_ptr + row[:, None] * BLOCK_D + offs_d[None, :], mask=(offs_s < NUM_SPLITS)[:, None],
                   other=0.0)
    den = tl.sum(w, axis=0)
    out = tl.sum(part * w[:, None], axis=0) / tl.where(den == 0.0, 1.0, den)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=offs_d < D)


def choose_num_splits(batch: int, kv_heads: int, max_context: int, sms: int = _DEFAULT_SMS) -> int:
    """Split the context when (sequence, KV head) programs alone cannot fill the GPU: aim
    for ~2 programs per SM, never below _MIN_SPLIT_TOKENS per split. Depends only on shapes
    (block-table width, not the context lengths), so it needs no host sync and a captured
    CUDA graph stays valid."""
    programs = batch * kv_heads
    if programs >= sms or max_context <= 2 * _MIN_SPLIT_TOKENS:
        return 1
    by_len = triton.cdiv(max_context, _MIN_SPLIT_TOKENS)
    by_occupancy = triton.cdiv(2 * sms, programs)
    return max(1, min(by_len, by_occupancy, _MAX_SPLITS))


def _decode_attention_triton(q, k_cache, v_cache, block_tables, context_lens, scale, num_splits):
    check_paged_args("decode_attention", q, k_cache, v_cache, block_tables, context_lens)
    if upcast_for_interpreter(q.dtype):
        out = _decode_attention_triton(q.float(), k_cache.float(), v_cache.float(), block_tables,
                                       context_lens, scale, num_splits)
        return out.to(q.dtype)
    B, Hq, D = q.shape
    _, BS, Hk, _ = k_cache.shape
    cfg = tile_config(q, BS, D)
    if num_splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else _DEFAULT_SMS
        num_splits = choose_num_splits(B, Hk, block_tables.shape[1] * BS, sms)
    max_ctx = block_tables.shape[1] * BS
    split_len = triton.cdiv(triton.cdiv(max_ctx, num_splits), cfg.block_n) * cfg.block_n
    out = torch.empty_like(q)
    G = Hq // Hk
    block_g = max(16, triton.next_power_of_2(G))  # tl.dot needs M >= 16
    if num_splits > 1:
        part = torch.empty((B, Hq, num_splits, cfg.block_d), dtype=torch.float32, device=q.device)
        lse = torch.empty((B, Hq, num_splits), dtype=torch.float32, device=q.device)
    else:
        part = lse = out
    _decode_attention_kernel[(B, Hk, num_splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        float(scale) * LOG2E, D, G, split_len,
        BLOCK_G=block_g, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d, BLOCK_SIZE=BS,
        NUM_SPLITS=num_splits, EVEN_D=cfg.block_d == D, DOT_PREC=cfg.dot_prec,
        num_warps=4, num_stages=cfg.num_stages,
    )
    if num_splits > 1:
        _decode_reduce_kernel[(B, Hq)](
            part, lse, out, out.stride(0), out.stride(1), Hq, D,
            NUM_SPLITS=num_splits, BLOCK_S=triton.next_power_of_2(num_splits), BLOCK_D=cfg.block_d,
            num_warps=4,
        )
    return out


def decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale, *, backend: str = "auto",
                     num_splits: int | None = None):
    """`num_splits`: None picks by `choose_num_splits`; 1 forces the single-pass kernel."""
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"decode_attention: num_splits must be a positive int, got {num_splits!r}")
    if use_triton(q, backend):
        return _decode_attention_triton(q, k_cache, v_cache, block_tables, context_lens, scale, num_splits)
    return decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale)
