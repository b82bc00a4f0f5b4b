"""Which implementation an op runs: the Triton kernel or the plain-torch reference.

`backend` is passed explicitly by the caller (the engine's config), never read from a global:
- "auto": Triton on CUDA tensors; on fp32 CPU tensors our C++ decode ops (kernels.cpu_ops)
  where they build, else the torch reference;
- "triton": always the Triton kernel (on CPU this needs TRITON_INTERPRET=1 set before
  triton was imported: the tests do that; it is ~3 ms per program, so for tiny models only);
- "torch": always the reference.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "triton", "torch")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(t: torch.Tensor, backend: str) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"kernel backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return False
    if backend == "auto":
        return t.is_cuda and triton_available()
    if not triton_available():
        raise RuntimeError("kernel backend 'triton' requested but triton is not installed")
    if not t.is_cuda and not interpreting():
        raise RuntimeError(
            "kernel backend 'triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported"
        )
    return True


def use_cpu_native(backend: str, *tensors: torch.Tensor) -> bool:
    """backend "auto" on fp32 CPU tensors with the C++ ops built."""
    if backend != "auto":
        return False
    from kernels.cpu_ops import native_ok

    return native_ok(*tensors)
