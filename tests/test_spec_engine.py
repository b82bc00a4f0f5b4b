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


@pytest.mark.integration
def test_full_kv_cache_raises_retryable_and_frees_every_block():
    """A verify pass that does not fit: a typed, retryable error, and nothing leaked: every
    block is free again and the target's sequences are gone (a retry starts clean)."""
    from llm_engine.speculative import NgramDrafter, SpecRequest, SpeculativeDecoder
    from llm_engine.speculative.engine_target import EngineTarget
    from parley.errors import KVCacheFullError

    torch.set_num_threads(1)
    eng = LLMEngine.from_pretrained(num_blocks=6, block_size=16, enable_prefix_caching=False)  # 96 slots
    total = eng.bm.num_free_blocks
    target = EngineTarget(eng)
    prompts = [eng.encode_chat(c) for c in CHATS]
    reqs = [SpecRequest(f"r{i}", p, max_tokens=200) for i, p in enumerate(prompts)]
    with pytest.raises(KVCacheFullError) as err:
        SpeculativeDecoder(target, NgramDrafter(), k_max=4).generate(reqs)
    assert err.value.retryable
    assert eng.bm.num_free_blocks == total and target.length("r0") == target.length("r1") == 0
    # a target left half-grown by a failing batch is rolled back, the earlier sequence included
    target.extend("a", prompts[0][:20])
    n_free = eng.bm.num_free_blocks
    with pytest.raises(KVCacheFullError):
        target.extend_batch({"a": [1, 2, 3], "b": list(range(100, 200))})
    assert target.length("a") == 20 and target.length("b") == 0 and eng.bm.num_free_blocks == n_free
    target.release("a")
    assert eng.bm.num_free_blocks == total
