"""The fused CPU decoder layer (one C++ call) against the per-op path it replaces, and the
row invariance it gives: a token's logits are the same bits however many rows share its pass
(cold prefill, a prefix-cache hit's short tail, chunked prefill, decode), so greedy output
after prefill() equals a cold prompt's."""

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


FORMATS = ["fp32", "bf16", "int8", "q4"]


@pytest.mark.parametrize("name, weight_format", [(n, f) for n in CONFIGS for f in FORMATS
                                                 if not (f == "q4" and n == "odd-heads")])  # q4: K % 32
def test_fused_matches_per_op_on_decode_and_verify(tmp_path, monkeypatch, name, weight_format):
    make_tiny_llama(tmp_path, **CONFIGS[name])
    engine = _engine(tmp_path, weight_format=weight_format)
    seqs = {"a": list(range(3, 40)), "b": list(range(50, 53))}
    feeds = {"a": [7, 8, 9, 10, 11], "b": [12]}  # a 5-token verify and a decode, one step
    f_per_op, l_per_op = _hidden(engine, seqs, feeds, fused=False)
    calls, real = [], cpu_layer._stack_kernel()
    monkeypatch.setattr(cpu_layer, "_stack_kernel", lambda: lambda *a: calls.append(a[1]) or real(*a))
    f_fused, l_fused = _hidden(engine, seqs, feeds, fused=True)
    # one call per pass (both prompts' prefills and the step), each over every layer
    assert calls == [engine.model.cfg.num_layers] * 3
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


TEMPLATE = "{% for m in messages %}t3 {{ m['content'] }} t4 {% endfor %}{% if add_generation_prompt %}t5{% endif %}"
# a near-flat random model (initializer_range 0.02): greedy argmaxes are near-ties, so an ulp
# of difference between two paths flips tokens (the old prefill path did within 40 tokens)
FLAT = dict(initializer_range=0.02)


@pytest.mark.parametrize("weight_format", FORMATS)
def test_a_rows_logits_do_not_depend_on_the_pass_it_shares(tmp_path, weight_format):
    make_tiny_llama(tmp_path, seed=3, **FLAT)
    engine = _engine(tmp_path, weight_format=weight_format, block_size=8)
    prompt = [(7 * i + 3) % 380 + 3 for i in range(45)]
    target = EngineTarget(engine)
    _, cold = target.extend("cold", prompt)  # one 45-row prefill pass
    target.release("cold")
    for cuts in ([40], [41, 44], [8, 16, 17, 30], list(range(1, 45))):  # short tails, chunks, decode
        pieces, start = [], 0
        for end in [*cuts, len(prompt)]:
            pieces.append(target.extend("split", prompt[start:end])[1])
            start = end
        target.release("split")
        assert torch.equal(torch.cat(pieces), cold), (weight_format, cuts)
    # and beside another sequence's rows in the same pass
    target.extend("other", list(range(100, 120)))
    target.extend("split", prompt[:37])
    both = target.extend_batch({"other": [5, 6, 7], "split": prompt[37:]})
    assert torch.equal(both[1][1], cold[37:]), weight_format


@pytest.mark.parametrize("weight_format", FORMATS)
def test_greedy_after_prefill_ahead_equals_cold(tmp_path, weight_format):
    make_tiny_llama(tmp_path, seed=4, **FLAT)
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    cold = _engine(tmp_path, weight_format=weight_format, block_size=8)
    warm = LLMEngine.from_pretrained(str(tmp_path), weight_format=weight_format, block_size=8)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    g = torch.Generator().manual_seed(11)
    for n in (13, 30, 52):
        words = [f"t{int(t)}" for t in torch.randint(6, 380, (n,), generator=g)]
        interim = [{"role": "user", "content": " ".join(words[:-2])}]
        final = [{"role": "user", "content": " ".join(words)}]
        ref = cold.chat([final], params)[0]
        rid = warm.prefill(interim)
        while warm.is_running(rid):
            warm.step()
        out = warm.chat([final], params)[0]
        assert out.num_cached_tokens >= 8, n  # the hit happened: only the tail was prefilled
        assert out.token_ids == ref.token_ids, (weight_format, n)
        again = warm.chat([final], params)[0]  # the whole prompt cached bar its last block
        assert again.token_ids == ref.token_ids, (weight_format, n)


@pytest.mark.parametrize("weight_format", ["fp32", "int8"])
def test_the_stack_call_is_the_layer_by_layer_calls_bit_for_bit(tmp_path, monkeypatch, weight_format):
    """Every layer in one C++ call (FusedStack) against one call per layer (FusedLayer), on a
    3-layer model (an odd count: the last layer's output lands in the caller's buffers)."""
    make_tiny_llama(tmp_path, num_hidden_layers=3)
    engine = _engine(tmp_path, weight_format=weight_format)
    seqs = {"a": list(range(3, 40)), "b": list(range(50, 53))}
    feeds = {"a": [7, 8, 9, 10, 11], "b": [12]}
    stacked = _hidden(engine, seqs, feeds, fused=True)
    monkeypatch.setattr(cpu_layer.FusedStack, "forward", lambda *a: None)
    calls, real = [], cpu_layer._kernel()
    monkeypatch.setattr(cpu_layer, "_kernel", lambda: lambda *a: calls.append(1) or real(*a))
    layered = _hidden(engine, seqs, feeds, fused=True)
    assert len(calls) == 3 * 3  # the layer-by-layer path did run
    assert torch.equal(stacked[0], layered[0]) and torch.equal(stacked[1], layered[1])


def test_the_stack_follows_a_weight_replaced_after_its_first_call(tmp_path):
    """The stack keeps the layers' weight pointers between steps; a linear whose weight is
    replaced (new storage), or a linear module swapped for another, must be seen on the next
    call, as the per-op path sees it."""
    make_tiny_llama(tmp_path)
    engine = _engine(tmp_path)
    seqs, feeds = {"a": list(range(3, 20))}, {"a": [7, 8]}
    before = _hidden(engine, seqs, feeds, fused=True)  # the stack has built its structs
    layer = engine.model.layers[1]
    layer.o_proj.weight = torch.nn.Parameter(layer.o_proj.weight.detach() * 1.5, requires_grad=False)
    new_down = torch.nn.Linear(layer.down_proj.in_features, layer.down_proj.out_features, bias=False)
    new_down.weight.data.copy_(layer.down_proj.weight.detach() * -0.5)
    layer.down_proj = type(layer.down_proj).converted(new_down, torch.float32)
    fused = _hidden(engine, seqs, feeds, fused=True)
    per_op = _hidden(engine, seqs, feeds, fused=False)
    assert not torch.allclose(per_op[0], before[0], rtol=1e-3, atol=1e-3)  # the change matters
    torch.testing.assert_close(fused[0], per_op[0], rtol=1e-5, atol=1e-5)
