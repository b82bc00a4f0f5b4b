"""The embedded SmolLM2 answers a conversation with the same greedy tokens whether its prompt
was prefilled cold or mostly came from the prefix cache after prefill() on the interim
transcript (the voice loop's prefill-ahead, on by default). Before the CPU prefill took the
decode kernels' arithmetic, int8 48-token replies after a hit left the cold path on 6 of these 8
prompts (3 at the first token) and bf16 on 2."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llm_engine import LLMEngine, SamplingParams
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROMPTS = Path(__file__).parent.parent / "benchmarks" / "data" / "voice_prompts.json"


def chats() -> list[list[dict[str, str]]]:
    spec = json.loads(PROMPTS.read_text())
    return [[{"role": "system", "content": spec["system"]}, *c["messages"]] for c in spec["chats"]]


@pytest.mark.parametrize("weight_format", ["fp32", "bf16", "int8", "q4"])
def test_greedy_after_prefill_ahead_equals_cold_on_the_real_model(weight_format):
    torch.set_num_threads(1)
    warm = LLMEngine.from_pretrained(weight_format=weight_format)
    cold = LLMEngine(warm.model, warm.tokenizer, replace(warm.config, enable_prefix_caching=False))
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    for i, final in enumerate(chats()):
        ref = cold.chat([final], params)[0]
        interim = [*final[:-1], {**final[-1], "content": final[-1]["content"].rsplit(" ", 2)[0]}]
        rid = warm.prefill(interim)
        wait_until(lambda r=rid: not warm.is_running(r), 60, "the prefill ahead")
        out = warm.chat([final], params)[0]
        assert out.num_cached_tokens >= 16, i  # the prefilled blocks were hit
        assert out.token_ids == ref.token_ids, (weight_format, i)
