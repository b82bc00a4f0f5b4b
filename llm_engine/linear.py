"""The engine's linear layer: nn.Linear with a CPU route chosen for decode.

Decode reads every weight once per step, so a linear's speed at 1-8 rows is the engine's
speed. On the CPU, F.linear in fp32 goes to the BLAS library torch was built with (MKL);
oneDNN's matmul (`torch.ops.mkldnn._linear_pointwise`, the op inductor emits) is the other
route. Measured on the 2-core AMD EPYC (Zen 5, AVX-512) dev machine, all 30 layers' fused
weights of SmolLM2-135M (425 MB fp32) per step:

| rows | threads | F.linear fp32 | oneDNN fp32 | oneDNN bf16 |
|------|---------|---------------|-------------|-------------|
| 1    | 1       | 26.1 ms       | 16.7 ms     | 14.5 ms     |
| 6    | 1       | 41.5 ms       | 25.1 ms     | 15.6 ms     |
| 1    | 2       | 24.7 ms       | 13.7 ms     | 8.8 ms      |

MKL's fp32 path neither streams the weights at full bandwidth on this CPU nor uses a second
thread; oneDNN does both. For the few rows of decode our own kernel (kernels.cpu_gemv) is
faster still. One 92160x576 matrix (212 MB fp32), 1 thread, best of 15, same run:

| rows | cpu_gemv fp32 | oneDNN fp32 | cpu_gemv bf16 | oneDNN bf16 |
|------|---------------|-------------|---------------|-------------|
| 1    | 6.3 ms        | 8.1 ms      | 3.5 ms        | 6.7 ms      |
| 4    | 10.0 ms       | 12.6 ms     | 5.6 ms        | 7.1 ms      |
| 8    | 14.7 ms       | 14.1 ms     | 7.5 ms        | 7.8 ms      |

On an AVX2-only EPYC (no AVX-512; ~10 GB/s from DRAM on one core), one decode step's weights
(`python -m benchmarks.cpu_gemv`, DRAM-resident, 1 thread, medians side by side): 1 / 2 / 8
rows fp32 57 / 53 / 75 ms (F.linear 71 / 125 / 157), bf16 40 / 36 / 47 ms (F.linear 40 / 64 /
260), int8 20 / 23 / 31 ms; so a verify pass costs about one decode step there too.

"auto", on CPU in inference, takes cpu_gemv at every row count: up to 8 rows (decode, small
batches, speculative verify) in one pass over the weights, above (prefill) in 8-row chunks
over cache-sized blocks of weight rows. Measured side by side (1 thread, machine shared): bf16
[1728, 576] at 16 / 128 rows 0.29 / 1.34 ms through oneDNN on an fp32 copy of the weight,
0.10 / 0.73 ms in 8-row chunks; the tied LM head [49152, 576] at 16 rows 112 ms against 7 ms
(its fp32 copy alone is 113 MB). fp32 at prefill sizes is slower than oneDNN (see
benchmarks/cpu_gemv.py) but kept: one kernel at every row count means one arithmetic: a row's
sum runs in the same order whatever the number of rows, so a k+1-row verify step scores a
token exactly as a 1-row decode step would, and a prompt's last row after a prefix-cache hit
(a few uncached rows) exactly as in a cold prefill of the whole prompt; with oneDNN for
prefill, greedy replies after a hit left the cold ones' path. oneDNN's bf16 matmul rounds its
output to bf16; mixing it in would make a decode step and a verify step (or a prefix-cache
hit's short prefill) disagree by a bf16 ulp, enough to flip greedy near-ties (measured: a
repeated 48-token greedy prompt diverged at token 24 with oneDNN bf16 alone). So every bf16
route here computes the same thing: activations rounded to bf16, exact products, fp32 sums
and output (oneDNN, when cpu_gemv is unavailable, on an fp32 copy of the weight). Elsewhere
(CUDA: cuBLAS), and whenever autograd records (no CPU route has a backward), F.linear.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from kernels.cpu_gemv import check_weight, cpu_gemv_available, gemv_checked

LINEAR_BACKENDS = ("auto", "onednn", "torch")
GEMV_DTYPES = (torch.float32, torch.bfloat16)  # the weights "auto" runs through kernels.cpu_gemv


@functools.cache
def onednn_available() -> bool:
    """torch built with oneDNN and its linear op present and right on a tiny problem."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    w, x = torch.randn(8, 4), torch.randn(3, 4)
    try:
        y = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    except RuntimeError:
        return False
    return bool(torch.allclose(y, x @ w.t(), atol=1e-5))


class Linear(nn.Linear):
    """nn.Linear whose compute dtype is its weight's: x is cast to it and the output back to
    x's dtype (how the bf16 weight format keeps an fp32 residual stream)."""

    backend: str = "auto"  # one of LINEAR_BACKENDS; set per model by set_linear_backend

    _gemv_for: tuple | None = None  # (weight storage, backend) the gemv eligibility was decided for
    _gemv_ok: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        route = self._route(x)
        if route == "torch":
            w = self.weight
            y = F.linear(x if x.dtype == w.dtype else x.to(w.dtype), w, self.bias)
            return y if y.dtype == x.dtype else y.to(x.dtype)
        x2 = x.reshape(-1, self.in_features)  # [M, in]
        if route == "gemv":  # bf16 weights: x rounded to bf16 inside
            y = gemv_checked(x2, self.weight)
        else:
            w = self.weight
            if w.dtype == torch.bfloat16:  # the same products as cpu_gemv's bf16 path (see above)
                x2, w = x2.to(torch.bfloat16).float(), w.float()
            y = torch.ops.mkldnn._linear_pointwise(x2.to(w.dtype), w, None, "none", [], "").to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

    def _route(self, x: torch.Tensor) -> str:
        """"torch" | "gemv" | "onednn" for this input."""
        if self.backend == "torch" or x.device.type != "cpu" or torch.is_grad_enabled():
            return "torch"
        if not onednn_available():
            if self.backend == "onednn":
                raise RuntimeError("linear backend 'onednn' asked for, but this torch build lacks it")
            return "torch"
        w = self.weight
        key = (w.data_ptr(), w.dtype, w.stride(), self.backend)  # no reference kept: .to() may replace w
        if self._gemv_for != key:
            self._gemv_ok = self.backend == "auto" and w.dtype in GEMV_DTYPES and _gemv_takes(w)
            self._gemv_for = key
        if self._gemv_ok and x.dtype == torch.float32 and x.numel() > 0:
            return "gemv"
        return "onednn"

    @classmethod
    def converted(cls, lin: nn.Linear, dtype: torch.dtype | None = None) -> Linear:
        """A new Linear with lin's weights (copied; cast to dtype when given), never sharing
        storage with lin, so a tied LM head can change format without touching the embedding."""
        dtype = dtype or lin.weight.dtype
        new = cls(lin.in_features, lin.out_features, bias=lin.bias is not None,
                  device=lin.weight.device, dtype=dtype)
        with torch.no_grad():
            new.weight.copy_(lin.weight)
            if lin.bias is not None:
                new.bias.copy_(lin.bias)
        new.requires_grad_(False)
        new.backend = getattr(lin, "backend", "auto")
        return new


def _gemv_takes(w: torch.Tensor) -> bool:
    if not cpu_gemv_available():
        return False
    try:
        check_weight(w)
    except ValueError:
        return False
    return True


def set_linear_backend(module: nn.Module, backend: str) -> None:
    if backend not in LINEAR_BACKENDS:
        raise ValueError(f"linear backend must be one of {'|'.join(LINEAR_BACKENDS)}, got {backend!r}")
    for m in module.modules():
        if isinstance(m, Linear):
            m.backend = backend
