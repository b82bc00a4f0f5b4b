"""The fused CPU decoder layer (one C++ call) against the per-op path it replaces."""

from __future__ import annotations

import pytest
import torch

import llm_engine.cpu_layer as cpu_layer
from llm_engine import LLMEngine, SamplingParams
from llm_engine.cpu_layer import fused_kernel_available
from llm_engine.speculative.engine_target import EngineTarget
from tests.llm_helpers import make_tiny_llama

pytestmark = pytest.mark.unit

CONFIGS = {
    "gqa2": {},
    "qwen-bias-mha": dict(num_key_value_heads=4, attention_bias=True),
    "odd-heads": dict(hidden_size=60, num_attention_heads=5, num_key_value_heads=1, intermediate_size=100),
}


@pytest.fixture(autouse=True)
def _built():
    if not fused_kernel_available():
        pytest.fail("the fused CPU layer kernel did not build (a C++ compiler is part of the setup)")


def _engine(path, **kw) -> LLMEngine:
    return LLMEngine.from_pretrained(str(path), enable_prefix_caching=False, **kw)


def _hidden(engine, seqs, feeds, fused: bool):
    """Run the model over `feeds` (new tokens per sequence) after the prompts; [T, H] prenorm."""
    engine.model.cpu_fused_layers = fused
    target = EngineTarget(engine)
    for sid, prompt in seqs.items():
        target.extend(sid, prompt)
    outs = target.extend_batch(feeds)
    for sid in seqs:
        target.release(sid)
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("weight_format", ["fp32", "bf16", "int8"])
def test_fused_matches_per_op_on_decode_and_verify(tmp_path, monkeypatch, name, weight_format):
    make_tiny_llama(tmp_path, **CONFIGS[name])
    engine = _engine(tmp_path, weight_format=weight_format)
    seqs = {"a": list(range(3, 40)), "b": list(range(50, 53))}
    feeds = {"a": [7, 8, 9, 10, 11], "b": [12]}  # a 5-token verify and a decode, one step
    f_per_op, l_per_op = _hidden(engine, seqs, feeds, fused=False)
    calls, real = [], cpu_layer._kernel()
    monkeypatch.setattr(cpu_layer, "_kernel", lambda: lambda *a: calls.append(1) or real(*a))
    f_fused, l_fused = _hidden(engine, seqs, feeds, fused=True)
    assert len(calls) == 2 * engine.model.cfg.num_layers  # the "b" prompt (3 tokens) and the step
    torch.testing.assert_close(f_fused, f_per_op, rtol=1e-5, atol=1e-5)  # silu's expf: an ulp apart
    torch.testing.assert_close(l_fused, l_per_op, rtol=1e-4, atol=1e-4)


def test_fused_engine_greedy_equals_per_op(tmp_path):
    make_tiny_llama(tmp_path)
    engine = _engine(tmp_path)
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    prompts = [list(range(5, 30)), list(range(100, 103))]
    engine.model.cpu_fused_layers = False
    ref = [o.token_ids for o in engine.generate(prompts, params)]
    engine.model.cpu_fused_layers = True
    assert [o.token_ids for o in engine.generate(prompts, params)] == ref
