"""SiLU(gate) * up for the gated MLP, on the fused [gate | up] projection output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._dispatch import use_triton
from kernels._triton import check, tl, triton, upcast_for_interpreter


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:  # [T, 2I] -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, I, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < I
    g = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    u = tl.load(x_ptr + row * stride_x + I + offs, mask=mask, other=0.0)
    g32 = g.to(tl.float32)
    # silu(g) = g * sigmoid(g), sigmoid through exp2; rounded to the input dtype before the
    # product, as torch's F.silu(gate) * up does.
    s = (g32 / (1.0 + tl.exp2(-1.4426950408889634 * g32))).to(g.dtype)
    y = s.to(tl.float32) * u.to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    check(x.dim() == 2 and x.shape[1] % 2 == 0, f"silu_and_mul: x [T, 2I] expected, got {tuple(x.shape)}")
    check(x.stride(1) == 1, "silu_and_mul: last dim must be contiguous")
    check(x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"silu_and_mul: bad dtype {x.dtype}")
    if upcast_for_interpreter(x.dtype):
        return _silu_and_mul_triton(x.float()).to(x.dtype)
    T, I = x.shape[0], x.shape[1] // 2
    out = torch.empty((T, I), dtype=x.dtype, device=x.device)
    block = 1024  # 4 warps x 32 lanes x 8 elements: one 16 B load per lane per operand
    _silu_and_mul_kernel[(T, triton.cdiv(I, block))](
        x, out, x.stride(0), out.stride(0), I, BLOCK=block, num_warps=4
    )
    return out


def silu_and_mul(x, *, backend: str = "auto"):
    if use_triton(x, backend):
        return _silu_and_mul_triton(x)
    return silu_and_mul_ref(x)
