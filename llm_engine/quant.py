"""Lower-precision linear weights for the CPU (behind EngineConfig.weight_format).

"bf16": weights stored in bf16 (half the bytes); llm_engine.linear.Linear computes with
activations rounded to bf16, exact products and fp32 sums.
"int8": per-output-channel symmetric int8 weights with fp32 scales, and per-row int8
activations, as llama.cpp's Q8 path does: kernels.cpu_gemv_i8 sums the integer products
exactly with AVX512-VNNI (a quarter of fp32's bytes, 64 multiply-adds an instruction).
"q4": the layers' weights in GGUF's Q4_1 (4-bit, a fp16 scale and minimum per 32 weights:
0.625 bytes a weight, 0.63x int8's), the same int8 activations (kernels.cpu_gemv_q4). A
GGUF whose layers are Q4_1 (the embedded SmolLM2) gives back exactly its own weights, so q4
runs the file's model where int8 rounds it again; the LM head stays int8 (the GGUF's is Q8_0).
Decode is weight-bandwidth bound (538 MB fp32 per token for SmolLM2-135M), so fewer bytes
is the only way past the fp32 floor; what each format gains and how far its greedy output
drifts from fp32 is measured in benchmarks/llm_engine.py, not assumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from kernels.cpu_gemv import (
    Q4_BLOCK,
    cpu_gemv_available,
    cpu_gemv_i8,
    cpu_gemv_q4,
    cpu_gemv_q4_ref,
    dequantize_q4,
    quantize_q4,
    quantize_rows_ref,
)
from llm_engine.linear import Linear

if TYPE_CHECKING:
    from llm_engine.model import LlamaModel


def bf16_linear(lin: nn.Linear) -> Linear:
    return Linear.converted(lin, torch.bfloat16)


class Int8Linear(nn.Module):
    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        w = lin.weight.detach().float()  # [out, in]
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # [out]
        q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight", q)
        self.register_buffer("scale", scale)
        self.register_buffer("wsum", q.to(torch.int32).sum(dim=1).to(torch.int32))  # [out]
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach().float().clone(), requires_grad=False)

    def dequantized(self) -> torch.Tensor:  # [out, in] fp32: what the int8 rows stand for
        return self.weight.float() * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] fp32 -> [..., out]
        x2 = x.reshape(-1, self.in_features).float()
        if x.device.type == "cpu" and x2.shape[0] > 0 and cpu_gemv_available():
            # prefill too (8-row chunks inside): the decode kernel's arithmetic for every row, and
            # on VNNI faster than an fp32 matmul over dequantized weights
            y = cpu_gemv_i8(x2, self.weight, self.scale, self.wsum)
        else:  # no kernel: the same quantization, sums in fp32 (exact below 2^24)
            q, xs = quantize_rows_ref(x2)
            y = F.linear(q, self.weight.float()) * xs * self.scale
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)


class Q4Linear(nn.Module):
    """weight: nibbles uint8 [out, in / 2], dm: fp16 [out, 2, in / 32] (block scales, minimums)
    (kernels.cpu_gemv.quantize_q4)."""

    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = lin.in_features, lin.out_features
        if self.in_features % Q4_BLOCK:
            raise ValueError(f"q4 weights need in_features divisible by {Q4_BLOCK}, got {self.in_features}")
        nibbles, dm = quantize_q4(lin.weight.detach())
        self.register_buffer("weight", nibbles)
        self.register_buffer("dm", dm)
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach().float().clone(), requires_grad=False)

    def dequantized(self) -> torch.Tensor:  # [out, in] fp32
        return dequantize_q4(self.weight, self.dm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] fp32 -> [..., out]
        x2 = x.reshape(-1, self.in_features).float()
        if x.device.type == "cpu" and x2.shape[0] > 0 and cpu_gemv_available():
            y = cpu_gemv_q4(x2, self.weight, self.dm)
        else:  # no kernel: the same quantized arithmetic in float64
            y = cpu_gemv_q4_ref(x2, self.weight, self.dm)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)


def quantize_model(model: LlamaModel, fmt: str) -> LlamaModel:
    """Replace the layers' and the LM head's linears in place (the embedding stays fp32; with
    q4 the LM head is int8, whose rows a 49k-vocabulary head reads best)."""
    cls = {"bf16": bf16_linear, "int8": Int8Linear, "q4": Q4Linear}.get(fmt)
    if cls is None:
        raise ValueError(f"weight format must be bf16, int8 or q4, got {fmt!r}")
    for layer in model.layers:
        for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            setattr(layer, name, cls(getattr(layer, name)))
    model.lm_head = Int8Linear(model.lm_head) if fmt == "q4" else cls(model.lm_head)
    return model
