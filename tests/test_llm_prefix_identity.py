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


@pytest.mark.parametrize("weight_format", ["fp32", "int8"])
def test_greedy_after_a_scored_prompt_equals_cold_on_the_real_model(weight_format):
    """The turn detector scores "history + the user's words" (engine.score_prompt); the reply's
    prompt continues it with the assistant header, and its prefill starts mid-block, from the
    score's freed last block (the prefix cache's tail)."""
    torch.set_num_threads(1)
    warm = LLMEngine.from_pretrained(weight_format=weight_format)
    cold = LLMEngine(warm.model, warm.tokenizer, replace(warm.config, enable_prefix_caching=False))
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    tok, tails = warm.tokenizer, 0
    for i, final in enumerate(chats()):
        ref = cold.chat([final], params)[0]
        ids = warm.encode_chat(final)
        # the open user message, as the turn detector asks it (pipeline.turn_text.prompt_ids)
        rendered, said = tok.render_chat(final, add_generation_prompt=False), final[-1]["content"]
        words = tok.encode(rendered[: rendered.rindex(said) + len(said)], add_special_tokens=False)
        assert ids[: len(words)] == words and len(ids) - len(words) >= 5, i
        assert warm.score_prompt(words, [ids[len(words)]], timeout_s=60) is not None
        out = warm.chat([final], params)[0]
        assert out.num_cached_tokens == len(words), i
        tails += len(words) % warm.bm.block_size > 0
        assert out.token_ids == ref.token_ids, (weight_format, i)
    assert tails >= len(chats()) // 2  # most of them started mid-block
