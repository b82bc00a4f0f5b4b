"""Lower-precision weight formats: numerics of the replaced linears."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from llm_engine.quant import Bf16Linear, Int8Linear


@pytest.mark.unit
def test_bf16_linear_close_to_fp32():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32, bias=True)
    x = torch.randn(5, 64)
    ref = lin(x)
    got = Bf16Linear(lin)(x)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()


@pytest.mark.unit
def test_int8_weights_within_half_a_step():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32, bias=False)
    q = Int8Linear(lin)
    assert q.weight.dtype == torch.int8
    err = (q.weight.float() * q.scale[:, None] - lin.weight).abs()
    assert (err <= q.scale[:, None] / 2 + 1e-7).all()
