"""Guarded Triton import shared by the kernel files.

A machine without triton still imports `kernels` and gets the torch references: there
`triton.jit` is an identity decorator and `tl.constexpr` a placeholder, so the kernel
definitions parse but are never launched (dispatch refuses the "triton" backend first).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAVE_TRITON = False

    class _Stub:
        class constexpr:  # mirrors triton.language.constexpr
            def __init__(self, value=None):
                self.value = value
        float32 = int64 = None

        @staticmethod
        def jit(fn=None, **_kw):
            return fn if fn is not None else (lambda f: f)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 << max(int(n) - 1, 0).bit_length()

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

    triton = tl = _Stub()

from kernels._dispatch import interpreting

__all__ = ["HAVE_TRITON", "check", "next_pow2", "tl", "triton", "upcast_for_interpreter"]


def next_pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(int(n) - 1, 0).bit_length())


def check(cond: bool, msg: str) -> None:
    """Launcher validation: a typed error, never an assert."""
    if not cond:
        raise ValueError(msg)


def upcast_for_interpreter(dtype: torch.dtype) -> bool:
    """The interpreter computes bf16 arithmetic on raw bit patterns (wrong numbers, no
    error), so bf16 tensors are run as fp32 there and cast back by the launcher."""
    return dtype == torch.bfloat16 and interpreting()
