"""SiLU(gate) * up for the gated MLP, on the fused [gate | up] projection output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._dispatch import use_triton


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:  # [T, 2I] -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul(x, *, backend: str = "auto"):
    if use_triton(x, backend):
        raise NotImplementedError("Triton silu_and_mul: see the kernels issue")
    return silu_and_mul_ref(x)
