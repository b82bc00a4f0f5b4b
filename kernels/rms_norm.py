"""RMSNorm with an optional fused residual add."""

from __future__ import annotations

import torch

from kernels import cpu_ops
from kernels._dispatch import use_cpu_native, use_triton
from kernels._triton import check, next_pow2, tl, triton, upcast_for_interpreter


def rms_norm_ref(
    x: torch.Tensor,  # [T, D]
    weight: torch.Tensor,  # [D]
    eps: float,
    residual: torch.Tensor | None = None,  # [T, D]
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face Llama's order of operations: normalize in fp32, cast, then scale.
    With `residual`, returns (norm(x + residual), x + residual)."""
    if residual is not None:
        x = x + residual
        residual = x
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * out.to(x.dtype)
    return out if residual is None else (out, residual)


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
    stride_x, stride_r, stride_o, stride_ro,
    D, eps,
    BLOCK_D: tl.constexpr, HAS_RES: tl.constexpr,
):
    # One row per program: a row (<= 8192 elements) fits one register tile, so x is read
    # once and the row is never re-read from memory for the second pass.
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RES:
        r = tl.load(res_ptr + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)  # rounded like torch's x + r
        tl.store(res_out_ptr + row * stride_ro + offs, x, mask=mask)
    x32 = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / D + eps)
    y = (x32 * rstd).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + offs, (y * w).to(out_ptr.dtype.element_ty), mask=mask)


def _rms_norm_triton(x, weight, eps, residual):
    check(x.dim() == 2 and weight.dim() == 1 and weight.shape[0] == x.shape[1],
          f"rms_norm: x [T, D] and weight [D] expected, got {tuple(x.shape)} and {tuple(weight.shape)}")
    check(x.stride(1) == 1 and weight.stride(0) == 1, "rms_norm: last dim must be contiguous")
    check(x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"rms_norm: bad dtype {x.dtype}")
    if residual is not None:
        check(residual.shape == x.shape and residual.dtype == x.dtype and residual.stride(1) == 1,
              "rms_norm: residual must match x in shape and dtype, last dim contiguous")
    if upcast_for_interpreter(x.dtype) or upcast_for_interpreter(weight.dtype):
        res = None if residual is None else residual.float()
        out = _rms_norm_triton(x.float(), weight.float(), eps, res)
        return (out.to(torch.promote_types(x.dtype, weight.dtype)) if residual is None
                else (out[0].to(torch.promote_types(x.dtype, weight.dtype)), out[1].to(x.dtype)))
    T, D = x.shape
    out = torch.empty((T, D), dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    res_out = torch.empty_like(x) if residual is not None else out
    res_in = residual if residual is not None else x
    block_d = next_pow2(D, 16)
    # Measured-by-design: 8 warps for D=4096 keeps 16 B loads per thread.
    num_warps = min(max(block_d // 512, 1), 16)
    _rms_norm_kernel[(T,)](
        x, res_in, weight, out, res_out,
        x.stride(0), res_in.stride(0), out.stride(0), res_out.stride(0),
        D, float(eps), BLOCK_D=block_d, HAS_RES=residual is not None, num_warps=num_warps,
    )
    return out if residual is None else (out, res_out)


def rms_norm(x, weight, eps, residual=None, *, backend: str = "auto"):
    if use_triton(x, backend):
        return _rms_norm_triton(x, weight, eps, residual)
    if use_cpu_native(backend, x, weight):
        return cpu_ops.rms_norm(x, weight, eps, residual)
    return rms_norm_ref(x, weight, eps, residual)
