"""Paged cache, prefix caching, continuous batching, preemption, abort, sampling, streaming."""

from __future__ import annotations

import asyncio

import pytest

from llm_engine import LLMEngine, SamplingParams
from llm_engine.block_manager import BlockManager
from llm_engine.sequence import Sequence
from tests.llm_helpers import make_tiny_llama

GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
PROMPTS = [list(range(5, 5 + n)) for n in (3, 17, 40, 9, 33)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    make_tiny_llama(path, seed=3)
    return path


def engine_for(model_dir, **kw):
    kw.setdefault("num_blocks", 128)
    kw.setdefault("block_size", 8)
    return LLMEngine.from_pretrained(model_dir, **kw)


@pytest.fixture(scope="module")
def alone(model_dir):
    eng = engine_for(model_dir, enable_prefix_caching=False)
    return [eng.generate([p], GREEDY)[0].token_ids for p in PROMPTS]


@pytest.mark.unit
def test_batch_equals_alone_with_chunked_prefill(model_dir, alone):
    eng = engine_for(model_dir, max_num_batched_tokens=20)  # prompts split into chunks mixed with decodes
    outs = eng.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == alone
    assert eng.bm.num_free_blocks == 128


@pytest.mark.unit
def test_prefix_hits_equal_cold(model_dir, alone):
    eng = engine_for(model_dir)
    first = eng.generate([PROMPTS[2]], GREEDY)[0]
    assert first.num_cached_tokens == 0
    again = eng.generate([PROMPTS[2]], GREEDY)[0]
    assert again.num_cached_tokens == 32  # 4 full blocks of 8; the last token is always computed
    assert again.token_ids == alone[2]
    # A next "turn": the previous conversation plus new tokens prefills only the new part.
    turn = PROMPTS[2] + first.token_ids + [7, 8, 9]
    hit = eng.generate([turn], GREEDY)[0]
    assert hit.num_cached_tokens >= 56
    cold = engine_for(model_dir, enable_prefix_caching=False).generate([turn], GREEDY)[0]
    assert hit.token_ids == cold.token_ids


@pytest.mark.unit
def test_preemption_equals_no_preemption(model_dir, alone):
    eng = engine_for(model_dir, num_blocks=14)  # 112 slots for 5 sequences of up to 64 tokens
    outs = eng.generate(PROMPTS, GREEDY)
    assert eng.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == alone
    assert eng.bm.num_free_blocks == 14


@pytest.mark.unit
def test_full_cache_never_crashes_or_loses_requests(model_dir):
    eng = engine_for(model_dir, num_blocks=9, max_num_seqs=8)
    prompts = [list(range(i, i + 30)) for i in range(12)]
    outs = eng.generate(prompts, SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))
    assert all(len(o.token_ids) == 30 and o.finish_reason == "length" for o in outs)
    assert eng.bm.num_free_blocks == 9


@pytest.mark.unit
def test_abort_frees_all_blocks(model_dir):
    eng = engine_for(model_dir)
    rid = eng.add_request(PROMPTS[2], GREEDY, request_id="a")
    other = eng.add_request(PROMPTS[1], GREEDY)
    for _ in range(3):
        eng.step()
    assert eng.bm.num_free_blocks < 128
    assert eng.abort(rid) is True and eng.abort(rid) is False
    eng.abort(other)
    assert eng.bm.num_free_blocks == 128 and not eng.has_unfinished()


@pytest.mark.unit
def test_truncate_rolls_back_and_unhashes():
    bm = BlockManager(8, 4)
    seq = Sequence("s", list(range(10)), GREEDY)
    bm.allocate(seq, 10)
    seq.num_computed_tokens = 10
    bm.commit_full_blocks(seq)
    assert len(bm.cached) == 2
    assert bm.truncate(seq, 6) == []
    assert len(seq.block_table) == 2 and seq.token_ids == list(range(6)) and len(bm.cached) == 1
    bm.free_seq(seq)
    assert bm.num_free_blocks == 8


@pytest.mark.unit
def test_cached_blocks_keep_their_tokens_compactly_and_still_hit():
    # a cached block kept a tuple of its token ids (and so the int objects): ~630 bytes a
    # block, filled a few blocks a turn over a long session; now 16 int32s in bytes
    import gc
    import tracemalloc

    bm = BlockManager(80, 16)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(8):
        toks = [50_000 + 7 * i + j for j in range(16 * 8 + 1)]  # fresh ints > 256, as a tokenizer's
        seq = Sequence("s", toks, GREEDY)
        bm.allocate(seq, len(toks))
        seq.num_computed_tokens = len(toks)
        bm.commit_full_blocks(seq)
        bm.free_seq(seq)
    del seq, toks
    gc.collect()
    kept = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    # kept per cached block, with the hash map: ~320 bytes; with tuples of ints ~900
    assert len(bm.cached) == 64 and kept < 64 * 500, kept
    again = Sequence("t", [50_000 + 7 * 7 + j for j in range(16 * 8 + 1)], GREEDY)
    bm.match_prefix(again)
    assert again.num_cached_tokens == 16 * 8


def _freed(bm: BlockManager, toks: list[int], computed: int) -> Sequence:
    seq = Sequence("s", list(toks), GREEDY)
    bm.allocate(seq, len(toks))
    seq.num_computed_tokens = computed
    bm.commit_full_blocks(seq)
    bm.free_seq(seq)
    return seq


@pytest.mark.unit
def test_a_freed_partial_block_is_copied_for_the_prompt_that_continues_it():
    bm = BlockManager(8, 4)
    _freed(bm, list(range(10)), 10)  # blocks [0-3] [4-7] full, [8, 9] the tail
    tail_block = bm.tails[bm.blocks[1].hash][0]
    reply = Sequence("r", [*range(10), 50, 51, 52], GREEDY)  # the score's words + a header
    copies = bm.match_prefix(reply)
    assert reply.num_cached_tokens == 10 and reply.num_computed_tokens == 10
    assert copies == [(tail_block, reply.block_table[2])] and reply.block_table[2] != tail_block
    # a prompt that parts from the tail inside it takes only the common tokens
    other = Sequence("o", [*range(9), 77, 78], GREEDY)
    assert len(bm.match_prefix(other)) == 1 and other.num_cached_tokens == 9
    # at least one token is left to compute (it yields the next-token logits)
    same = Sequence("x", list(range(10)), GREEDY)
    bm.match_prefix(same)
    assert same.num_cached_tokens == 9


@pytest.mark.unit
def test_a_tail_is_forgotten_once_its_block_is_handed_out_again():
    bm = BlockManager(4, 4)
    _freed(bm, list(range(6)), 6)
    assert len(bm.tails) == 1
    filler = Sequence("f", [90 + i for i in range(16)], GREEDY)
    assert bm.allocate(filler, 16)  # every block, the tail's too
    assert bm.tails == {}
    bm.free_seq(filler)
    late = Sequence("l", list(range(8)), GREEDY)
    assert bm.match_prefix(late) == [] and late.num_cached_tokens == 0
    # a sequence with nothing computed past its full blocks leaves no tail
    _freed(bm, list(range(8)), 8)
    assert bm.tails == {}


@pytest.mark.unit
def test_tail_hits_equal_cold(model_dir, alone):
    """A scored prompt's tail (engine.score_prompt, the turn detector's) serves the next
    request that continues it mid-block; its tokens are those of a cold engine."""
    eng = engine_for(model_dir)
    words = PROMPTS[4][:29]  # 3 full blocks of 8 and 5 tokens
    assert eng.score_prompt(words, [1, 2], timeout_s=30) is not None
    out = eng.generate([PROMPTS[4]], GREEDY)[0]
    assert out.num_cached_tokens == 29  # 24 from full blocks, 5 from the tail
    assert out.token_ids == alone[4]
    assert eng.bm.num_free_blocks == 128
    eng.close()


@pytest.mark.unit
def test_a_tail_handed_out_in_the_pass_that_copies_it_is_copied_before_it_is_written(model_dir):
    """The tail's block goes back to the free list at once: a request admitted in the same
    schedule pass may take it and write it in that step's forward pass. The copy comes first."""
    four = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    score = list(range(5, 18))  # 13 tokens: a full block of 8 and a 5-token tail
    reply, other = [*score, 40, 41, 42], list(range(60, 108))  # other: 48 tokens, 6 blocks
    cold = engine_for(model_dir, enable_prefix_caching=False)
    want = [o.token_ids for o in cold.generate([reply, other], four)]
    eng = engine_for(model_dir, num_blocks=8)
    eng.generate([score], SamplingParams(max_tokens=1, temperature=0.0))
    (src, _), = eng.bm.tails.values()
    first: list = []
    schedule = eng.scheduler.schedule

    def spy():
        batch = schedule()
        if not first:
            first.append([list(s.block_table) for s in batch.seqs])
        return batch

    eng.scheduler.schedule = spy
    outs = eng.generate([reply, other], four)
    assert first and src in first[0][1] and src not in first[0][0]  # the other request took it
    assert outs[0].num_cached_tokens == 13
    assert [o.token_ids for o in outs] == want


@pytest.mark.unit
def test_sampling_seed_reproducible_and_filters(model_dir):
    eng = engine_for(model_dir)
    p = SamplingParams(max_tokens=16, temperature=1.0, top_k=20, top_p=0.9, min_p=0.05, seed=7,
                       repetition_penalty=1.3, ignore_eos=True)
    a, b = eng.generate([PROMPTS[0], PROMPTS[0]], [p, p])
    assert a.token_ids == b.token_ids and len(a.token_ids) == 16
    other = eng.generate([PROMPTS[0]], SamplingParams(max_tokens=16, temperature=1.0, seed=8, ignore_eos=True))
    assert other[0].token_ids != a.token_ids
    topk1 = eng.generate([PROMPTS[0]], SamplingParams(max_tokens=16, temperature=5.0, top_k=1, seed=1,
                                                      ignore_eos=True))
    assert topk1[0].token_ids == eng.generate([PROMPTS[0]], SamplingParams(
        max_tokens=16, temperature=0.0, ignore_eos=True))[0].token_ids


@pytest.mark.unit
def test_stop_tokens_and_max_tokens(model_dir, alone):
    eng = engine_for(model_dir)
    stop_at = alone[1][5]
    out = eng.generate([PROMPTS[1]], SamplingParams(max_tokens=24, temperature=0.0,
                                                    stop_token_ids=(stop_at,), ignore_eos=True))[0]
    assert out.finish_reason == "stop" and out.token_ids[-1] == stop_at
    assert len(out.token_ids) == alone[1].index(stop_at) + 1


@pytest.mark.unit
@pytest.mark.parametrize("bad", [
    dict(max_tokens=0), dict(temperature=-1.0), dict(top_p=0.0), dict(top_k=-2), dict(min_p=1.5),
    dict(repetition_penalty=0.0), dict(temperature=float("nan")), dict(stop=("",)),
])
def test_bad_sampling_values(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


@pytest.mark.unit
def test_bad_prompts(model_dir):
    eng = engine_for(model_dir, max_model_len=64)
    for prompt in ([], "", list(range(70)), [10**6]):
        with pytest.raises(ValueError):
            eng.generate([prompt], GREEDY)
    with pytest.raises(ValueError):
        LLMEngine.from_pretrained(model_dir, speculative="ngram")


@pytest.mark.unit
def test_missing_and_corrupt_model_files(tmp_path):
    from parley.errors import ModelCorruptError, ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="no such file"):
        LLMEngine.from_pretrained(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelCorruptError, match=r"bad\.gguf"):
        LLMEngine.from_pretrained(bad)
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"], "vocab_size": 8, "hidden_size": 8,'
                                   ' "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1}')
    with pytest.raises(ValueError, match="LlamaForCausalLM"):
        LLMEngine.from_pretrained(d)


@pytest.fixture(scope="module")
def smollm():
    return LLMEngine.from_pretrained(max_cache_tokens=2048)


@pytest.mark.integration
@pytest.mark.slow
async def test_stream_chat_deltas_join_to_chat_text_and_abort(smollm):
    msgs = [{"role": "user", "content": "Name three French cities with accents, like Orléans."}]
    params = SamplingParams(max_tokens=24, temperature=0.0)
    deltas = [d async for d in smollm.stream_chat(msgs, params, request_id="s1")]
    full = smollm.chat([msgs], params)[0]
    assert "".join(deltas) == full.text and len(deltas) > 3
    gen = smollm.stream_chat(msgs, SamplingParams(max_tokens=200, temperature=0.0), request_id="s2")
    got = [await gen.__anext__() for _ in range(2)]
    assert smollm.abort("s2") is True
    rest = [d async for d in gen]
    assert len(got) + len(rest) < 200
    await asyncio.sleep(0.3)
    assert smollm.bm.num_free_blocks == len(smollm.bm.blocks) and not smollm.has_unfinished()


@pytest.mark.integration
def test_stop_strings_and_utf8_detok(smollm):
    msgs = [{"role": "user", "content": "Count from 1 to 10 separated by commas."}]
    base = smollm.chat([msgs], SamplingParams(max_tokens=32, temperature=0.0))[0]
    assert "5" in base.text
    out = smollm.chat([msgs], SamplingParams(max_tokens=32, temperature=0.0, stop=("5",)))[0]
    assert out.finish_reason == "stop" and out.text == base.text[: base.text.index("5")]
    ids = smollm.tokenizer.encode("naïve 日本 🎉 done")
    from llm_engine.detokenizer import IncrementalDetokenizer

    d = IncrementalDetokenizer(smollm.tokenizer)
    text = "".join(d.add(i) for i in ids) + d.finish()
    assert text == "naïve 日本 🎉 done" and "\ufffd" not in text


@pytest.mark.integration
def test_warmup_builds_the_speculator_and_leaves_the_system_prompt_cached():
    from llm_engine.speculative import SpeculativeConfig

    eng = LLMEngine.from_pretrained(max_cache_tokens=1024, speculative=SpeculativeConfig(method="ngram"))
    system = [{"role": "system", "content": "You are a terse assistant who answers in one short sentence."}]
    assert eng.spec_metrics is None  # built lazily, by the first step
    assert eng.warmup(system) > 0
    assert eng.spec_metrics is not None
    assert not eng.has_unfinished() and eng.bm.num_free_blocks == len(eng.bm.blocks)
    out = eng.chat([[*system, {"role": "user", "content": "Hi."}]], SamplingParams(max_tokens=2))[0]
    assert out.num_cached_tokens >= eng.bm.block_size  # the system prompt's full blocks hit


@pytest.mark.unit
def test_a_prefill_ahead_runs_in_small_chunks_only_in_steps_no_request_needs():
    from llm_engine.scheduler import Scheduler

    sched = Scheduler(BlockManager(num_blocks=64, block_size=8), max_num_seqs=8, max_num_batched_tokens=512,
                      hint_chunk=8)
    hint = Sequence("hint", list(range(5, 45)), GREEDY, prefill_only=True)
    scored = Sequence("scored", list(range(5, 25)), GREEDY, prefill_only=True, score_ids=(3,))
    assert hint.is_hint and not scored.is_hint  # a scored prefill has a caller waiting

    def step() -> dict[str, int]:
        batch = sched.schedule()
        for seq, n in zip(batch.seqs, batch.num_tokens):
            seq.num_computed_tokens += n
        return {s.request_id: n for s, n in zip(batch.seqs, batch.num_tokens)}

    sched.add(hint)
    assert step() == {"hint": 8}  # one chunk, not the whole prompt
    req = Sequence("req", list(range(60, 80)), GREEDY)
    sched.add(req)
    sched.add(scored)
    assert step() == {"req": 20, "scored": 20}  # the hint waits while anyone else needs a step
    sched.remove(scored)
    req.token_ids.append(7)
    assert step() == {"req": 1}
    sched.remove(req)
    assert [step() for _ in range(4)] == [{"hint": 8}] * 4 and hint.num_uncomputed == 0
    with pytest.raises(ValueError, match="hint_chunk"):
        Scheduler(BlockManager(num_blocks=4, block_size=8), 8, 512, hint_chunk=0)
