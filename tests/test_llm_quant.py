"""The engine's linear layer (CPU route) and lower-precision weight formats."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import llm_engine.linear as linear_mod
from kernels.cpu_gemv import cpu_gemv_i8_ref, cpu_gemv_q4_ref
from llm_engine.linear import Linear, onednn_available, set_linear_backend
from llm_engine.quant import Int8Linear, Q4Linear, bf16_linear


def _linear(n_in=576, n_out=100, bias=True, seed=0) -> Linear:
    torch.manual_seed(seed)
    lin = nn.Linear(n_in, n_out, bias=bias)
    return Linear.converted(lin)


@pytest.mark.unit
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_route_matches_f_linear(rows, bias):
    if not onednn_available():
        pytest.fail("this torch build has no oneDNN linear; the CPU route is untested")
    lin = _linear(bias=bias)
    x = torch.randn(rows, 576)
    ref = F.linear(x.double(), lin.weight.double(), None if lin.bias is None else lin.bias.double())
    for backend in ("onednn", "torch"):
        lin.backend = backend
        with torch.inference_mode():
            got = lin(x)
        assert got.dtype == torch.float32 and got.shape == (rows, 100)
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_autograd_takes_f_linear(monkeypatch):
    lin = _linear()
    lin.requires_grad_(True)
    calls = []
    real = linear_mod.F.linear
    monkeypatch.setattr(linear_mod.F, "linear", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(2, 576, requires_grad=True)
    lin(x).sum().backward()  # oneDNN's op has no backward: the route must not be taken here
    assert calls and x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.unit
def test_backend_validation_and_missing_onednn(monkeypatch):
    lin = _linear()
    with pytest.raises(ValueError, match="linear backend"):
        set_linear_backend(lin, "mkl")
    monkeypatch.setattr(linear_mod, "onednn_available", lambda: False)
    set_linear_backend(lin, "onednn")
    with torch.inference_mode(), pytest.raises(RuntimeError, match="lacks it"):
        lin(torch.randn(1, 576))
    set_linear_backend(lin, "auto")
    with torch.inference_mode():
        assert lin(torch.randn(1, 576)).shape == (1, 100)


@pytest.mark.unit
def test_bf16_linear_close_to_fp32_and_keeps_source():
    lin = _linear(n_in=64, n_out=32)
    before = lin.weight.clone()
    q = bf16_linear(lin)
    assert q.weight.dtype == torch.bfloat16 and q.weight.data_ptr() != lin.weight.data_ptr()
    x = torch.randn(5, 64)
    with torch.inference_mode():
        ref, got = lin(x), q(x)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert torch.equal(lin.weight, before)  # a tied embedding would be untouched


@pytest.mark.unit
@pytest.mark.parametrize("rows", [1, 3, 8, 12])
@pytest.mark.parametrize("k", [576, 100, 37])
def test_int8_linear_matches_its_reference_and_stays_close_to_fp32(rows, k):
    torch.manual_seed(rows + k)
    lin = nn.Linear(k, 50, bias=True)
    q = Int8Linear(lin)
    x = torch.randn(rows, k)
    with torch.inference_mode():
        got, exact = q(x), lin(x)
    ref = cpu_gemv_i8_ref(x, q.weight, q.scale) + lin.bias  # the kernel's arithmetic in float64
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)
    assert (got - exact).abs().max() < 0.03 * exact.abs().max()  # two 8-bit roundings


@pytest.mark.unit
def test_int8_weights_within_half_a_step():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32, bias=False)
    q = Int8Linear(lin)
    assert q.weight.dtype == torch.int8
    err = (q.weight.float() * q.scale[:, None] - lin.weight).abs()
    assert (err <= q.scale[:, None] / 2 + 1e-7).all()


@pytest.mark.unit
def test_int8_engine_exposes_a_real_valued_lm_head_to_drafters(tmp_path):
    """A draft head scores tokens with the target's LM head: int8 rows must come dequantized."""
    from llm_engine import LLMEngine
    from llm_engine.speculative.engine_target import EngineTarget
    from tests.llm_helpers import make_tiny_llama

    make_tiny_llama(tmp_path)
    fp32 = EngineTarget(LLMEngine.from_pretrained(str(tmp_path))).lm_head_weight()
    int8 = EngineTarget(LLMEngine.from_pretrained(str(tmp_path), weight_format="int8")).lm_head_weight()
    assert int8.dtype == torch.float32 and int8.shape == fp32.shape
    step = fp32.abs().amax(dim=1, keepdim=True) / 127
    assert ((int8 - fp32).abs() <= step / 2 + 1e-6).all()


@pytest.mark.unit
@pytest.mark.parametrize("rows", [1, 3, 8, 12])
@pytest.mark.parametrize("k", [576, 64])
def test_q4_linear_matches_its_reference_and_stays_close_to_fp32(rows, k):
    torch.manual_seed(rows + k)
    lin = nn.Linear(k, 50, bias=True)
    q = Q4Linear(lin)
    assert q.weight.dtype == torch.uint8 and q.weight.shape == (50, k // 2) and q.dm.shape == (50, 2, k // 32)
    x = torch.randn(rows, k)
    with torch.inference_mode():
        got, exact = q(x), lin(x)
    ref = cpu_gemv_q4_ref(x, q.weight, q.dm) + lin.bias
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)
    # 4-bit weights (a 16th of each block's range per step) and 8-bit activations
    assert (got - exact).abs().max() < 0.15 * exact.abs().max()
    step = q.dm[:, 0].float().repeat_interleave(32, dim=1)
    assert ((q.dequantized() - lin.weight).abs() <= step / 2 + 1e-4).all()


@pytest.mark.unit
def test_q4_needs_rows_of_whole_blocks(tmp_path):
    from llm_engine import LLMEngine
    from tests.llm_helpers import make_tiny_llama

    with pytest.raises(ValueError, match="divisible by 32"):
        Q4Linear(nn.Linear(60, 8))
    make_tiny_llama(tmp_path, hidden_size=60, num_attention_heads=5, num_key_value_heads=1, intermediate_size=100)
    with pytest.raises(ValueError, match="divisible by 32"):
        LLMEngine.from_pretrained(str(tmp_path), weight_format="q4")


@pytest.mark.unit
def test_q4_engine_keeps_an_int8_lm_head_and_answers_like_its_reference(tmp_path, monkeypatch):
    """Layers in q4, the LM head int8; greedy tokens through the kernels equal those of the
    same quantized model on the float64 reference path (no kernel)."""
    import llm_engine.quant as quant_mod
    from llm_engine import LLMEngine, SamplingParams
    from tests.llm_helpers import make_tiny_llama

    make_tiny_llama(tmp_path)
    engine = LLMEngine.from_pretrained(str(tmp_path), weight_format="q4")
    assert isinstance(engine.model.layers[0].qkv_proj, Q4Linear) and isinstance(engine.model.lm_head, Int8Linear)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    fast = engine.generate([list(range(5, 30))], params)[0].token_ids
    engine.model.cpu_fused_layers = False
    monkeypatch.setattr(quant_mod, "cpu_gemv_available", lambda: False)
    assert engine.generate([list(range(5, 30))], params)[0].token_ids == fast


@pytest.mark.unit
def test_the_cli_and_session_offer_exactly_the_engines_weight_formats():
    """pipeline.config names them without importing torch; the engine's list is the truth."""
    import pipeline.config as session_config
    from llm_engine.config import WEIGHT_FORMATS, EngineConfig

    assert session_config.WEIGHT_FORMATS == WEIGHT_FORMATS
    assert session_config.SessionConfig(weight_format="q4").weight_format == "q4"
    with pytest.raises(ValueError, match="weight_format"):
        EngineConfig(weight_format="q8")
    with pytest.raises(ValueError, match="weight_format"):
        session_config.SessionConfig(weight_format="q8")
