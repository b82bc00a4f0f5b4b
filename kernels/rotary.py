"""Rotary position embedding on q and k at arbitrary positions (rotate-half layout)."""

from __future__ import annotations

import torch

from kernels import cpu_ops
from kernels._dispatch import use_cpu_native, use_triton
from kernels._triton import check, next_pow2, tl, triton, upcast_for_interpreter


def rotary_ref(
    q: torch.Tensor,  # [T, Hq, D]
    k: torch.Tensor,  # [T, Hk, D]
    positions: torch.Tensor,  # [T] int64
    cos: torch.Tensor,  # [P, D/2] fp32, precomputed (Llama-3 scaling already applied)
    sin: torch.Tensor,  # [P, D/2]
) -> tuple[torch.Tensor, torch.Tensor]:
    c = cos[positions].to(q.dtype)[:, None, :]  # [T, 1, D/2]
    s = sin[positions].to(q.dtype)[:, None, :]

    def rot(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    return rot(q), rot(k)


@triton.jit
def _rotate_heads(x_ptr, o_ptr, stride_t, stride_h, stride_ot, stride_oh, t, H, c, s, offs_d,
                  HALF, BLOCK_H: tl.constexpr):
    # Rotates all H heads of token t: [BLOCK_H, HALF] tiles of the two halves.
    for h0 in range(0, H, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        mask = (offs_h[:, None] < H) & (offs_d[None, :] < HALF)
        src = x_ptr + t * stride_t + offs_h[:, None] * stride_h + offs_d[None, :]
        dst = o_ptr + t * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        tl.store(dst, (x1 * c - x2 * s).to(o_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, qo_ptr, ko_ptr, pos_ptr, cos_ptr, sin_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_qot, stride_qoh, stride_kot, stride_koh,
    stride_cos, Hq, Hk, HALF,
    BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr,
):
    # One program per token: cos/sin rows are loaded once and reused for every q and k head.
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_HALF)
    dmask = offs_d < HALF
    # rounded to the activation dtype first, as the reference (and Hugging Face) does
    c = tl.load(cos_ptr + pos * stride_cos + offs_d, mask=dmask, other=0.0).to(qo_ptr.dtype.element_ty)
    s = tl.load(sin_ptr + pos * stride_cos + offs_d, mask=dmask, other=0.0).to(qo_ptr.dtype.element_ty)
    c = c.to(tl.float32)[None, :]
    s = s.to(tl.float32)[None, :]
    _rotate_heads(q_ptr, qo_ptr, stride_qt, stride_qh, stride_qot, stride_qoh, t, Hq, c, s, offs_d,
                  HALF, BLOCK_H)
    _rotate_heads(k_ptr, ko_ptr, stride_kt, stride_kh, stride_kot, stride_koh, t, Hk, c, s, offs_d,
                  HALF, BLOCK_H)


def _rotary_triton(q, k, positions, cos, sin):
    check(q.dim() == 3 and k.dim() == 3 and q.shape[0] == k.shape[0] and q.shape[2] == k.shape[2],
          f"rotary: q [T, Hq, D] and k [T, Hk, D] expected, got {tuple(q.shape)}, {tuple(k.shape)}")
    T, Hq, D = q.shape
    check(D % 2 == 0, f"rotary: head dim must be even, got {D}")
    check(cos.shape == sin.shape and cos.dim() == 2 and cos.shape[1] == D // 2,
          f"rotary: cos/sin [P, {D // 2}] expected, got {tuple(cos.shape)}, {tuple(sin.shape)}")
    check(cos.stride() == sin.stride() and cos.stride(1) == 1, "rotary: cos/sin must share a contiguous layout")
    check(positions.shape == (T,) and not positions.is_floating_point(), "rotary: positions [T] int expected")
    check(q.stride(2) == 1 and k.stride(2) == 1, "rotary: head dim must be contiguous")
    check(q.dtype == k.dtype and q.dtype in (torch.float32, torch.float16, torch.bfloat16),
          f"rotary: q/k dtypes {q.dtype}/{k.dtype} unsupported")
    if upcast_for_interpreter(q.dtype):
        qo, ko = _rotary_triton(q.float(), k.float(), positions, cos, sin)
        return qo.to(q.dtype), ko.to(k.dtype)
    Hk = k.shape[1]
    qo = torch.empty((T, Hq, D), dtype=q.dtype, device=q.device)
    ko = torch.empty((T, Hk, D), dtype=k.dtype, device=k.device)
    block_half = next_pow2(D // 2, 16)
    block_h = min(next_pow2(max(Hq, Hk)), max(1, 4096 // block_half))
    _rotary_kernel[(T,)](
        q, k, qo, ko, positions, cos, sin,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        qo.stride(0), qo.stride(1), ko.stride(0), ko.stride(1),
        cos.stride(0), Hq, Hk, D // 2,
        BLOCK_HALF=block_half, BLOCK_H=block_h, num_warps=4,
    )
    return qo, ko


def rotary(q, k, positions, cos, sin, *, backend: str = "auto"):
    if use_triton(q, backend):
        return _rotary_triton(q, k, positions, cos, sin)
    if use_cpu_native(backend, q, k, cos, sin):
        return cpu_ops.rotary(q, k, positions, cos, sin)
    return rotary_ref(q, k, positions, cos, sin)
