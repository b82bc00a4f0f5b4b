"""Rotary position embedding on q and k at arbitrary positions (rotate-half layout)."""

from __future__ import annotations

import torch

from kernels._dispatch import use_triton


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


def rotary(q, k, positions, cos, sin, *, backend: str = "auto"):
    if use_triton(q, backend):
        raise NotImplementedError("Triton rotary: see the kernels issue")
    return rotary_ref(q, k, positions, cos, sin)
