"""Engine faults at load: a truncated or corrupt model file fails with a typed error naming the
file, never a crash deep in numpy or a half-loaded engine. (Aborts at every point of a request's
life and preemption at a full cache are tested in tests/test_llm_serving.py.)"""

from __future__ import annotations

import json

import pytest

from llm_engine import LLMEngine
from parley.assets import model_path
from parley.errors import ModelCorruptError, ModelError

pytestmark = [pytest.mark.unit]


@pytest.fixture(scope="module")
def gguf_bytes() -> bytes:
    return model_path("smollm2-135m-instruct").read_bytes()


@pytest.mark.parametrize(("name", "cut"), [("half.gguf", 0.5), ("header.gguf", 4096), ("tail.gguf", -1000)])
def test_a_truncated_gguf_fails_at_load_with_the_file_named(tmp_path, gguf_bytes, name, cut):
    end = int(len(gguf_bytes) * cut) if isinstance(cut, float) else cut
    path = tmp_path / name
    path.write_bytes(gguf_bytes[:end])
    with pytest.raises(ModelCorruptError, match=name.replace(".", r"\.")) as info:
        LLMEngine.from_pretrained(path, num_threads=1)
    assert not info.value.retryable and "re-install" in info.value.fix


def test_a_gguf_with_scrambled_metadata_fails_at_load_with_the_file_named(tmp_path, gguf_bytes):
    path = tmp_path / "scrambled.gguf"
    path.write_bytes(gguf_bytes[:100] + bytes(b ^ 0xFF for b in gguf_bytes[100:20_000]) + gguf_bytes[20_000:])
    with pytest.raises(ModelCorruptError, match=r"scrambled\.gguf"):
        LLMEngine.from_pretrained(path, num_threads=1)
    blank = tmp_path / "blank.gguf"  # a valid magic, then nothing that says what model it is
    blank.write_bytes(gguf_bytes[:8] + bytes(5000))
    with pytest.raises((ModelError, ValueError), match=r"blank\.gguf"):
        LLMEngine.from_pretrained(blank, num_threads=1)


def test_a_corrupt_safetensors_directory_fails_at_load_with_the_file_named(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}))
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ModelCorruptError, match=r"model\.safetensors"):
        LLMEngine.from_pretrained(d, num_threads=1)
    (d / "config.json").write_text("{ truncated")
    with pytest.raises(ModelCorruptError, match=r"config\.json"):
        LLMEngine.from_pretrained(d, num_threads=1)
