"""Greedy tokens identical to transformers: random-weight tiny Llamas and the embedded GGUF."""

from __future__ import annotations

import pytest
import torch

from llm_engine import LLMEngine, SamplingParams
from tests.llm_helpers import hf_greedy, make_tiny_llama

GREEDY = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)

CONFIGS = {
    "gqa2-untied": {},
    "gqa2-kernels-decode": dict(engine=dict(cpu_sdpa_decode=False)),
    "mha-tied": dict(num_key_value_heads=4, tie_word_embeddings=True),
    "odd-heads-gqa3": dict(hidden_size=72, num_attention_heads=9, num_key_value_heads=3),
    "mqa": dict(num_attention_heads=6, hidden_size=96, num_key_value_heads=1),
    "llama3-rope": dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 64}),
}


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_matches_transformers(tmp_path, name):
    overrides = dict(CONFIGS[name])
    engine_kw = overrides.pop("engine", {})
    ref = make_tiny_llama(tmp_path, seed=len(name), **overrides)
    engine = LLMEngine.from_pretrained(tmp_path, num_blocks=64, block_size=16, **engine_kw)
    prompts = [[1, 17, 33, 250, 4, 90, 61], list(range(3, 40))]
    outs = engine.generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outs):
        assert out.token_ids == hf_greedy(ref, prompt, 48), name
        assert out.finish_reason == "length"
    assert engine.bm.num_free_blocks == 64


@pytest.mark.unit
def test_rope_scaling_changes_output(tmp_path):
    # Guards the test above: the llama3 config really exercises the scaled frequencies.
    from llm_engine.config import ModelConfig
    from llm_engine.rope import inv_frequencies

    base = dict(vocab_size=8, hidden_size=64, intermediate_size=8, num_layers=1, num_heads=1,
                num_kv_heads=1, head_dim=64, rope_theta=500000.0)
    plain = inv_frequencies(ModelConfig(**base))
    scaled = inv_frequencies(ModelConfig(**base, rope_scaling=CONFIGS["llama3-rope"]["rope_parameters"]))
    assert not torch.equal(plain, scaled)


@pytest.fixture(scope="module")
def gguf_pair():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parley.assets import model_path

    torch.set_num_threads(1)
    path = model_path("smollm2-135m-instruct")
    engine = LLMEngine.from_pretrained(path, max_cache_tokens=2048)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                               dtype=torch.float32).eval()
    return engine, tok, ref


@pytest.mark.integration
@pytest.mark.slow
def test_gguf_greedy_matches_transformers_gguf(gguf_pair):
    engine, tok, ref = gguf_pair
    msgs = [{"role": "user", "content": "Write three sentences about the sea."}]
    ids = engine.encode_chat(msgs)
    assert ids == list(tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=False))
    out = engine.generate([ids], GREEDY)[0]
    assert out.token_ids == hf_greedy(ref, ids, 48)
    assert len(out.text) > 20


TEXTS = [
    "Hello world", "café naïve résumé Ångström", "日本語のテキストと中文", "emoji 🎉👍🏽 🇫🇷",
    "12345 and 3.14159, 2026-12-02", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "  spaces\t\ttabs\n\nnewlines  ", "don't you'll WE'RE", "x=[1,2,3]; print(f'{x!r}')", "",
]


@pytest.mark.integration
@pytest.mark.slow
def test_gguf_tokenizer_matches_transformers(gguf_pair):
    engine, tok, _ = gguf_pair
    for text in TEXTS:
        ids = engine.tokenizer.encode(text)
        assert ids == tok.encode(text, add_special_tokens=True), text
        assert engine.tokenizer.decode(ids, skip_special_tokens=False) == tok.decode(ids), text
