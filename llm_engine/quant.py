"""Lower-precision linear weights for the CPU (behind EngineConfig.weight_format).

"bf16": weights stored in bf16 (half the bytes), activations cast around the matmul
(llm_engine.linear.Linear: its compute dtype is its weight's).
"int8": per-output-channel symmetric int8 weights with fp32 scales; the matmul dequantizes
inside a torch.compile'd function so the weights are read as int8 (a quarter of the bytes).
Decode is weight-bandwidth bound (538 MB fp32 per token for SmolLM2-135M), so fewer bytes
is the only way past the fp32 floor; whether a given kernel gets there is measured in
benchmarks/llm_engine.py, not assumed.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from llm_engine.linear import Linear
from llm_engine.model import LlamaModel


def bf16_linear(lin: nn.Linear) -> Linear:
    return Linear.converted(lin, torch.bfloat16)


@functools.cache
def _int8_mm():
    def mm(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (x @ w.to(x.dtype).t()) * scale

    return torch.compile(mm, dynamic=True)


class Int8Linear(nn.Module):
    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        w = lin.weight.detach().float()  # [out, in]
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0  # [out]
        self.register_buffer("weight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.bias = None if lin.bias is None else nn.Parameter(lin.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _int8_mm()(x, self.weight, self.scale)
        return y if self.bias is None else y + self.bias


def quantize_model(model: LlamaModel, fmt: str) -> LlamaModel:
    """Replace the layers' and the LM head's nn.Linear in place (the embedding stays fp32)."""
    cls = {"bf16": bf16_linear, "int8": Int8Linear}.get(fmt)
    if cls is None:
        raise ValueError(f"weight format must be bf16 or int8, got {fmt!r}")
    for layer in model.layers:
        for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            setattr(layer, name, cls(getattr(layer, name)))
    model.lm_head = cls(model.lm_head)
    return model
