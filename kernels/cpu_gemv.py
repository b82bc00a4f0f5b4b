"""Skinny CPU matmul for decode: y = x @ w.T for 1..8 rows, fp32 or bf16 weights.

fp32 weights: fp32 products and sums. bf16 weights: x rounded to bf16 (nearest even), exact
products, fp32 sums (AVX512-BF16 dot products where the CPU has them); y is always fp32.

The kernel is csrc/cpu_gemv.cpp, built and loaded by kernels.cpu_native; where it cannot be
built `cpu_gemv_available()` is False and the engine keeps oneDNN. Why it exists, with the
figures measured on the 2-core Zen 5 dev machine: llm_engine/linear.py.
"""

from __future__ import annotations

import functools

import torch

from kernels.cpu_native import I32, I64, P, bind, library

MAX_ROWS = 8


@functools.cache
def _kernels():
    lib = library("cpu_gemv")
    if lib is None:
        return None
    return {torch.float32: bind(lib, "parley_gemv_f32", P, P, P, I64, I64, I64, I32),
            torch.bfloat16: bind(lib, "parley_gemv_bf16", P, P, P, I64, I64, I64, I32)}


def cpu_gemv_available() -> bool:
    return _kernels() is not None


def check_weight(w: torch.Tensor) -> None:
    """The weight's side of cpu_gemv's checks (callers that reuse a weight check it once)."""
    if w.device.type != "cpu" or w.dim() != 2 or not w.is_contiguous():
        raise ValueError(f"cpu_gemv: w must be a contiguous [N, K] CPU tensor, got {tuple(w.shape)}")
    if w.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"cpu_gemv: x fp32 and w fp32/bf16 expected, got w {w.dtype}")
    if _kernels() is None:
        raise RuntimeError("the CPU gemv kernel could not be built (see the log)")


def cpu_gemv(
    x: torch.Tensor,  # [M, K] fp32, 1 <= M <= 8
    w: torch.Tensor,  # [N, K] fp32 or bf16, contiguous
) -> torch.Tensor:  # [M, N] fp32
    if x.device.type != "cpu" or x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"cpu_gemv: x [M, K] and w [N, K] expected, got {tuple(x.shape)} and {tuple(w.shape)}")
    if not 1 <= x.shape[0] <= MAX_ROWS:
        raise ValueError(f"cpu_gemv takes 1..{MAX_ROWS} rows, got {x.shape[0]}")
    if x.dtype != torch.float32:
        raise ValueError(f"cpu_gemv: x fp32 and w fp32/bf16 expected, got {x.dtype} and {w.dtype}")
    check_weight(w)
    return gemv_checked(x, w)


def gemv_checked(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cpu_gemv once the caller has checked x (fp32 [M, K], 1 <= M <= 8) and w (check_weight):
    7 us of checks saved per call, ~1 ms per decode step of a 30-layer model."""
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=torch.float32)
    _kernels()[w.dtype](x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, torch.get_num_threads())
    return y


def cpu_gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    """The kernel's arithmetic in float64: bf16 weights meet x rounded to bf16."""
    xr = x.to(torch.bfloat16) if w.dtype == torch.bfloat16 else x
    return (xr.double() @ w.double().t()).float()
