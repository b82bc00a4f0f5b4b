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
thread; oneDNN does both, and in bf16 its cost barely grows with the number of rows (what
speculative verification needs). "auto" takes oneDNN on CPU whenever torch has it, F.linear
elsewhere (CUDA: cuBLAS) and whenever autograd records (oneDNN's op has no backward).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

LINEAR_BACKENDS = ("auto", "onednn", "torch")


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        w = self.weight
        xin = x if x.dtype == w.dtype else x.to(w.dtype)
        if self._use_onednn(x):
            y = torch.ops.mkldnn._linear_pointwise(xin, w, self.bias, "none", [], "")
        else:
            y = F.linear(xin, w, self.bias)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def _use_onednn(self, x: torch.Tensor) -> bool:
        if self.backend == "torch" or x.device.type != "cpu" or torch.is_grad_enabled():
            return False
        if not onednn_available():
            if self.backend == "onednn":
                raise RuntimeError("linear backend 'onednn' asked for, but this torch build lacks it")
            return False
        return True

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


def set_linear_backend(module: nn.Module, backend: str) -> None:
    if backend not in LINEAR_BACKENDS:
        raise ValueError(f"linear backend must be one of {'|'.join(LINEAR_BACKENDS)}, got {backend!r}")
    for m in module.modules():
        if isinstance(m, Linear):
            m.backend = backend
