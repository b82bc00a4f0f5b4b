"""Skinny CPU matmul for decode: y = x @ w.T for 1..8 rows, fp32, bf16, int8 or 4-bit weights;
more rows (prefill) run in 8-row chunks with the same arithmetic per output, so a row's result
never depends on how many rows share the call (csrc/cpu_gemv.cpp, row_chunks).

fp32 weights: fp32 products and sums. bf16 weights: x rounded to bf16 (nearest even), exact
products, fp32 sums (AVX512-BF16 dot products where the CPU has them). int8 weights (a scale
per row) and 4-bit weights (GGUF's Q4_1: a scale and minimum per 32) meet x quantized to int8
per row, exact integer sums (cpu_gemv_i8, cpu_gemv_q4). y is always fp32.

The kernel is csrc/cpu_gemv.cpp, built and loaded by kernels.cpu_native; where it cannot be
built `cpu_gemv_available()` is False and the engine keeps oneDNN. Why it exists, with the
figures measured on the 2-core Zen 5 dev machine: llm_engine/linear.py.
"""

from __future__ import annotations

import functools

import torch

from kernels.cpu_native import I32, I64, P, bind, library, threads

MAX_ROWS = 8  # rows that share one read of the weights (more rows: another pass, from cache)


@functools.cache
def _kernels():
    lib = library("cpu_gemv")
    if lib is None:
        return None
    return {torch.float32: bind(lib, "parley_gemv_f32", P, P, P, I64, I64, I64, I32),
            torch.bfloat16: bind(lib, "parley_gemv_bf16", P, P, P, I64, I64, I64, I32),
            torch.int8: bind(lib, "parley_gemv_i8", P, P, P, P, P, I64, I64, I64, I32),
            torch.uint8: bind(lib, "parley_gemv_q4", P, P, P, P, I64, I64, I64, I32)}


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
    _kernels()[w.dtype](x.data_ptr(), w.data_ptr(), y.data_ptr(), m, n, k, threads())
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
                    y.data_ptr(), x.shape[0], n, x.shape[1], threads())
    return y


Q4_BLOCK = 32  # weights per (scale, min) pair of the 4-bit format
Q4_GROUP = 16  # blocks whose words are interleaved (csrc/cpu_gemv.cpp)


def quantize_q4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] (K a multiple of 32) -> (nibbles uint8 [N, K / 2], dm fp16 [N, 2, K / 32]):
    GGUF's Q4_1, weight = d * nibble + m per block of 32 along k (m the block's minimum, d its
    range / 15, both fp16), the nibbles in the kernel's layout (csrc/cpu_gemv.cpp: groups of
    16 blocks interleaved by 4-element words, the rest as GGUF lays a block out). From weights
    that were Q4_1 (a GGUF's, dequantized) it gives back the same nibbles and fp16 pairs, since
    each block's minimum and maximum are its nibbles 0 and 15."""
    n, k = w.shape
    if k % Q4_BLOCK:
        raise ValueError(f"quantize_q4: K must be a multiple of {Q4_BLOCK}, got {k}")
    blocks = w.detach().float().reshape(n, k // Q4_BLOCK, Q4_BLOCK)  # [N, B, 32]
    lo, hi = blocks.amin(dim=2), blocks.amax(dim=2)  # [N, B]
    d, m = ((hi - lo) / 15.0).half(), lo.half()
    scale = torch.where(d.float() > 0, d.float(), torch.ones_like(lo))
    q = torch.round((blocks - m.float()[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8)
    g = k // Q4_BLOCK // Q4_GROUP * Q4_GROUP
    words = q[:, :g].reshape(n, g // Q4_GROUP, Q4_GROUP, 8, 4).transpose(2, 3)  # [N, G, r, j, 4]
    grouped = words[:, :, 0::2] | (words[:, :, 1::2] << 4)  # [N, G, 4, 16, 4]: chunk c = words 2c, 2c + 1
    tail = q[:, g:, :16] | (q[:, g:, 16:] << 4)  # [N, T, 16]: GGUF's block layout
    nibbles = torch.cat([grouped.reshape(n, -1), tail.reshape(n, -1)], dim=1)
    return nibbles.contiguous(), torch.stack([d, m], dim=1).contiguous()  # [N, 2, B]: scales, minimums


def dequantize_q4(nibbles: torch.Tensor, dm: torch.Tensor) -> torch.Tensor:
    """quantize_q4's inverse: -> [N, K] fp32, d * nibble + m."""
    n, nb = nibbles.shape[0], dm.shape[2]
    g = nb // Q4_GROUP * Q4_GROUP
    grouped = nibbles[:, : g * 16].reshape(n, g // Q4_GROUP, 4, Q4_GROUP, 4)
    words = torch.stack([grouped & 0x0F, grouped >> 4], dim=3).reshape(n, g // Q4_GROUP, 8, Q4_GROUP, 4)
    head = words.transpose(2, 3).reshape(n, g, Q4_BLOCK)
    tail = nibbles[:, g * 16:].reshape(n, nb - g, 16)
    q = torch.cat([head, torch.cat([tail & 0x0F, tail >> 4], dim=2)], dim=1).float()  # [N, B, 32]
    return (dm[:, 0, :, None].float() * q + dm[:, 1, :, None].float()).reshape(n, -1)


def cpu_gemv_q4(
    x: torch.Tensor,  # [M, K] fp32, M >= 1
    w: torch.Tensor,  # [N, K / 2] uint8 nibbles (quantize_q4)
    dm: torch.Tensor,  # [N, 2, K / 32] fp16 (scales, minimums)
) -> torch.Tensor:  # [M, N] fp32
    """4-bit weights x int8-quantized activations (per-row absmax, as cpu_gemv_i8), exact
    int32 sums per block."""
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] < 1 or x.shape[1] % Q4_BLOCK:
        raise ValueError(f"cpu_gemv_q4: x fp32 [M, K] (M >= 1, K a multiple of {Q4_BLOCK}) expected, "
                         f"got {x.dtype} {tuple(x.shape)}")
    n, k = w.shape[0], x.shape[1]
    if w.dtype != torch.uint8 or w.shape != (n, k // 2) or not w.is_contiguous():
        raise ValueError(f"cpu_gemv_q4: w contiguous uint8 [N, {k // 2}] expected, got {w.dtype} {tuple(w.shape)}")
    if dm.dtype != torch.float16 or dm.shape != (n, 2, k // Q4_BLOCK) or not dm.is_contiguous():
        raise ValueError(f"cpu_gemv_q4: dm contiguous fp16 [{n}, 2, {k // Q4_BLOCK}] expected, got {tuple(dm.shape)}")
    fns = _kernels()
    if fns is None:
        raise RuntimeError("the CPU gemv kernel could not be built (see the log)")
    x = x.contiguous()
    y = torch.empty(x.shape[0], n, dtype=torch.float32)
    fns[torch.uint8](x.data_ptr(), w.data_ptr(), dm.data_ptr(), y.data_ptr(), x.shape[0], n, k,
                     threads())
    return y


def cpu_gemv_q4_ref(x: torch.Tensor, w: torch.Tensor, dm: torch.Tensor) -> torch.Tensor:
    q, xs = quantize_rows_ref(x.float())
    return ((q.double() @ dequantize_q4(w, dm).double().t()) * xs.double()).float()


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
