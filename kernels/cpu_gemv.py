"""Skinny CPU matmul for decode: y = x @ w.T for 1..8 rows, fp32 or bf16 weights; more rows
(prefill) run in 8-row chunks with the same arithmetic per output, so a row's result never
depends on how many rows share the call (csrc/cpu_gemv.cpp, row_chunks).

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

MAX_ROWS = 8  # rows that share one read of the weights (more rows: another pass, from cache)


@functools.cache
def _kernels():
    lib = library("cpu_gemv")
    if lib is None:
        return None
    return {torch.float32: bind(lib, "parley_gemv_f32", P, P, P, I64, I64, I64, I32),
            torch.bfloat16: bind(lib, "parley_gemv_bf16", P, P, P, I64, I64, I64, I32),
            torch.int8: bind(lib, "parley_gemv_i8", P, P, P, P, P, I64, I64, I64, I32)}


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
    x: torch.Tensor,  # [M, K] fp32, M >= 1
    w: torch.Tensor,  # [N, K] fp32 or bf16, contiguous
) -> torch.Tensor:  # [M, N] fp32
    if x.device.type != "cpu" or x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"cpu_gemv: x [M, K] and w [N, K] expected, got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[0] < 1:
        raise ValueError(f"cpu_gemv takes 1 or more rows, got {x.shape[0]}")
    if x.dtype != torch.float32:
        raise ValueError(f"cpu_gemv: x fp32 and w fp32/bf16 expected, got {x.dtype} and {w.dtype}")
    check_weight(w)
    return gemv_checked(x, w)


def gemv_checked(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """cpu_gemv once the caller has checked x (fp32 [M, K], M >= 1) and w (check_weight):
    7 us of checks saved per call, ~1 ms per decode step of a 30-layer model."""
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, dtype=torch.float32)
    _kernels()[w.dtype](x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, torch.get_num_threads())
    return y


def cpu_gemv_i8(
    x: torch.Tensor,  # [M, K] fp32, M >= 1
    w: torch.Tensor,  # [N, K] int8, contiguous
    scale: torch.Tensor,  # [N] fp32: row n of the real weight is scale[n] * w[n]
    wsum: torch.Tensor,  # [N] int32: sum_k w[n, k] (see csrc/cpu_gemv.cpp)
) -> torch.Tensor:  # [M, N] fp32
    """int8 weights x int8-quantized activations (per-row absmax), exact int32 sums."""
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] < 1:
        raise ValueError(f"cpu_gemv_i8: x fp32 [M, K] with 1 or more rows expected, got {tuple(x.shape)}")
    if w.dtype != torch.int8 or w.dim() != 2 or w.shape[1] != x.shape[1] or not w.is_contiguous():
        raise ValueError(f"cpu_gemv_i8: w contiguous int8 [N, K] expected, got {w.dtype} {tuple(w.shape)}")
    n = w.shape[0]
    if scale.dtype != torch.float32 or wsum.dtype != torch.int32 or scale.shape != (n,) or wsum.shape != (n,):
        raise ValueError("cpu_gemv_i8: scale fp32 [N] and wsum int32 [N] expected")
    fns = _kernels()
    if fns is None:
        raise RuntimeError("the CPU gemv kernel could not be built (see the log)")
    x = x.contiguous()
    y = torch.empty(x.shape[0], n, dtype=torch.float32)
    fns[torch.int8](x.data_ptr(), w.data_ptr(), scale.contiguous().data_ptr(), wsum.contiguous().data_ptr(),
                    y.data_ptr(), x.shape[0], n, x.shape[1], torch.get_num_threads())
    return y


def quantize_rows_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] fp32 -> (q [M, K] integer-valued fp32 in [-127, 127], xs [M, 1]): the
    kernel's activation quantization (round half to even), op for op."""
    xs = x.abs().amax(dim=1, keepdim=True) / 127.0
    xs = torch.where(xs > 0, xs, torch.ones_like(xs))
    return torch.round(x / xs), xs


def cpu_gemv_i8_ref(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    q, xs = quantize_rows_ref(x.float())
    return ((q.double() @ w.double().t()) * xs.double() * scale.double()[None, :]).float()


def cpu_gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # [M, K], [N, K] -> [M, N]
    """The kernel's arithmetic in float64: bf16 weights meet x rounded to bf16."""
    xr = x.to(torch.bfloat16) if w.dtype == torch.bfloat16 else x
    return (xr.double() @ w.double().t()).float()
