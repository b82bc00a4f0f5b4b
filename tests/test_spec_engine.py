"""Speculation inside LLMEngine: greedy identical to plain, KV blocks freed, prefix cache hits."""

from __future__ import annotations

import pytest
import torch

from llm_engine import LLMEngine, SamplingParams
from llm_engine.speculative import SpeculativeConfig

CHATS = [[{"role": "user", "content": "Set a timer for ten minutes called pasta."}],
         [{"role": "user", "content": "Why do cats purr?"}]]


@pytest.fixture(scope="module")
def engines():
    torch.set_num_threads(1)
    plain = LLMEngine.from_pretrained()
    return plain


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "head", "auto"])
def test_engine_greedy_identical_and_blocks_freed(engines, method):
    plain = engines
    params = SamplingParams(max_tokens=24, temperature=0.0)
    ref = [o.token_ids for o in plain.chat(CHATS, params)]
    plain.speculative = SpeculativeConfig(method=method, num_tokens=4)
    try:
        free_before = plain.bm.num_free_blocks
        outs = plain.chat(CHATS, params)
        assert [o.token_ids for o in outs] == ref  # batch of 2, per-sequence k
        assert plain.spec_metrics.drafted > 0
        assert plain.bm.num_free_blocks == free_before  # every block back
        hits = plain.bm.num_hits
        again = plain.chat(CHATS[:1], params)  # a later turn re-sends the conversation
        assert again[0].token_ids == ref[0]
        assert plain.bm.num_hits > hits  # prefix cache still hits after speculative turns
    finally:
        plain.speculative = None
