"""RMSNorm with an optional fused residual add."""

from __future__ import annotations

import torch

from kernels._dispatch import use_triton


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


def rms_norm(x, weight, eps, residual=None, *, backend: str = "auto"):
    if use_triton(x, backend):
        raise NotImplementedError("Triton rms_norm: see the kernels issue")
    return rms_norm_ref(x, weight, eps, residual)
