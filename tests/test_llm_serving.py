"""The serving path on a tiny random Llama: speculation inside the engine step (greedy identity
plain / speculative / streaming / batched / preempted), aborts at every point with every block
back, queued admission that never takes the engine lock, prefill ahead, ChatStream."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llm_engine import LLMEngine, SamplingParams
from llm_engine.speculative import Draft, Drafter, SpeculativeConfig
from tests.llm_helpers import make_tiny_llama

pytestmark = pytest.mark.unit
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
# repetitive prompts: prompt lookup drafts (and is partly right) on every one
PROMPTS = [[5, 6, 7, 8] * 4 + [5, 6], list(range(10, 40)) + list(range(10, 20)), [9, 9, 9],
           [20, 21, 22, 23, 24, 20, 21, 22, 23] * 3]
TEMPLATE = "{% for m in messages %}t3 {{ m['content'] }} t4 {% endfor %}{% if add_generation_prompt %}t5{% endif %}"
CHAT = [{"role": "user", "content": "t30 t31 t32 t33 t30 t31 t32 t33 t30 t31"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-serving")
    make_tiny_llama(path, seed=5)
    (path / "chat_template.jinja").write_text(TEMPLATE)
    return path


def engine(model_dir, spec: str | None = None, **kw) -> LLMEngine:
    kw.setdefault("num_blocks", 96)
    kw.setdefault("block_size", 8)
    cfg = None if spec is None else SpeculativeConfig(method=spec, num_tokens=4, ngram_min=1)
    return LLMEngine.from_pretrained(model_dir, speculative=cfg, **kw)


@pytest.fixture(scope="module")
def alone(model_dir):
    eng = engine(model_dir, enable_prefix_caching=False)
    return [eng.generate([p], GREEDY)[0].token_ids for p in PROMPTS]


class OracleDrafter(Drafter):
    """Drafts the known greedy continuation with every third drafted token wrong: passes that
    accept several tokens, reject in the middle and roll back."""

    name = "oracle"

    def __init__(self, prompts, replies) -> None:
        self.refs = [(p, p + r) for p, r in zip(prompts, replies)]

    def propose(self, seq_id, ctx, k):
        for prompt, full in self.refs:
            if ctx[: len(prompt)] == prompt and ctx == full[: len(ctx)]:
                ids = full[len(ctx): len(ctx) + k]
                return Draft([t if (len(ctx) + i) % 3 else (t + 1) % 384 for i, t in enumerate(ids)])
        return Draft([])


def oracle_engine(model_dir, alone, **kw) -> LLMEngine:
    eng = engine(model_dir, "ngram", **kw)
    eng._speculator().drafter = OracleDrafter(PROMPTS, alone)
    return eng


def test_greedy_speculative_equals_plain_alone_and_batched(model_dir, alone):
    spec = engine(model_dir, "ngram")
    assert [spec.generate([p], GREEDY)[0].token_ids for p in PROMPTS] == alone
    assert spec.spec_metrics.drafted > 0
    one = oracle_engine(model_dir, alone)
    assert [one.generate([p], GREEDY)[0].token_ids for p in PROMPTS] == alone
    # batched, prompts prefilled in 12-token chunks in the same steps as other requests' verify passes
    mixed = oracle_engine(model_dir, alone, max_num_batched_tokens=12)
    outs = mixed.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in outs] == alone
    m = mixed.spec_metrics
    assert m.accepted > 10 and m.drafted > m.accepted  # multi-token passes and rejections
    assert all(o.metrics["tokens_per_pass"] > 1.2 for o in outs)
    assert mixed.num_free_blocks == mixed.num_blocks and not mixed.has_unfinished()


def test_draft_model_by_path_through_the_engine_loader(model_dir, alone):
    """method="draft" loads the draft through the target's loader; the same weights as draft
    accept every greedy draft."""
    eng = LLMEngine.from_pretrained(model_dir, num_blocks=96, block_size=8, speculative=SpeculativeConfig(
        method="draft", draft_model=str(model_dir), num_tokens=4, adaptive=False))
    assert [eng.generate([p], GREEDY)[0].token_ids for p in PROMPTS[:2]] == alone[:2]
    m = eng.spec_metrics
    assert m.accepted == m.drafted > 20 and m.mean_accepted_length > 3
    assert eng.num_free_blocks == eng.num_blocks


def test_stop_token_ids_and_text_match_with_and_without_speculation(model_dir, alone):
    plain, spec = engine(model_dir), engine(model_dir, "ngram")
    stop_at = alone[1][6]
    p = SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=(stop_at,), ignore_eos=True)
    a, b = plain.generate([PROMPTS[1]], p)[0], spec.generate([PROMPTS[1]], p)[0]
    assert a.token_ids == b.token_ids and a.token_ids[-1] == stop_at and a.text == b.text
    assert a.finish_reason == b.finish_reason == "stop"


def test_mixed_batch_speculating_seeded_and_sampled_requests(model_dir, alone):
    """Seeded sampling falls back to plain decoding for that request alone: the same seed gives
    the same sample as on a plain engine, beside greedy requests that speculate."""
    seeded = SamplingParams(max_tokens=12, temperature=1.0, top_k=8, seed=11, ignore_eos=True)
    ref = engine(model_dir).generate([PROMPTS[0]], seeded)[0].token_ids
    eng = oracle_engine(model_dir, alone, max_num_batched_tokens=16)
    outs = eng.generate([*PROMPTS, PROMPTS[0]], [GREEDY] * len(PROMPTS) + [seeded])
    assert [o.token_ids for o in outs[:-1]] == alone and outs[-1].token_ids == ref
    assert "drafted" not in outs[-1].metrics and outs[0].metrics["drafted"] > 0


def test_preemption_by_tiny_cache_with_speculation(model_dir, alone):
    eng = oracle_engine(model_dir, alone, num_blocks=12)  # 96 slots for 4 sequences of up to 64 tokens
    outs = eng.generate(PROMPTS, GREEDY)
    assert eng.scheduler.num_preemptions > 0
    assert [o.token_ids for o in outs] == alone
    assert eng.num_free_blocks == 12


def test_streaming_equals_generate_with_speculation(model_dir):
    spec, plain = engine(model_dir, "ngram"), engine(model_dir)
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    ref = plain.chat([CHAT], params)[0]

    async def consume():
        stream = spec.stream_chat(CHAT, params, request_id="s")
        assert stream.request_id == "s" and stream.output is None
        deltas = [d async for d in stream]
        return deltas, stream.output

    deltas, out = asyncio.run(consume())
    assert "".join(deltas) == ref.text and out.token_ids == ref.token_ids
    assert out.finish_reason == "length" and out.metrics["ttft_s"] > 0 and out.prompt_token_ids == ref.prompt_token_ids
    assert spec.num_free_blocks == spec.num_blocks


def test_aborts_at_every_point_free_every_block(model_dir, alone):
    eng = oracle_engine(model_dir, alone, max_num_batched_tokens=8)
    free = eng.num_blocks
    # queued: never scheduled
    rid = eng.add_request(PROMPTS[1], GREEDY)
    assert eng.abort(rid) and eng.num_free_blocks == free and not eng.has_unfinished()
    # prefilling: the 40-token prompt after one 8-token chunk
    rid = eng.add_request(PROMPTS[1], GREEDY)
    eng.step()
    assert eng.num_free_blocks < free
    assert eng.abort(rid) and eng.num_free_blocks == free
    # drafting: aborted (from another thread) while the drafter proposes
    drafter = eng._speculator().drafter
    propose = drafter.propose
    hit = {}

    def aborting_propose(seq_id, ctx, k):
        if "draft" not in hit:
            t = threading.Thread(target=lambda: hit.setdefault("draft", eng.abort(seq_id)))
            t.start()
            t.join()
        return propose(seq_id, ctx, k)

    drafter.propose = aborting_propose
    out = eng.generate([PROMPTS[0]], GREEDY)[0]
    drafter.propose = propose
    assert hit["draft"] is True and out.finish_reason == "abort"
    assert eng.num_free_blocks == free and not eng.has_unfinished()

    # verifying: aborted (from another thread) while the pass's drafts are being accepted
    spec = eng._speculator()
    verify = spec.verify

    def aborting_verify(seq, logits, feats):
        if "verify" not in hit:
            t = threading.Thread(target=lambda: hit.setdefault("verify", eng.abort(seq.request_id)))
            t.start()
            t.join()
        return verify(seq, logits, feats)

    spec.verify = aborting_verify
    out = eng.generate([PROMPTS[3]], GREEDY)[0]
    spec.verify = verify
    assert hit["verify"] is True and out.finish_reason == "abort"
    assert eng.num_free_blocks == free and not eng.has_unfinished()

    # from inside the sink (the engine thread, lock held): deltas stop, the blocks go after the step
    got = []

    def sink(delta, final):
        got.append(final)
        if final is None and len(got) == 3:
            assert eng.abort("v") is True

    eng.add_request(PROMPTS[0], GREEDY, request_id="v", sink=sink)
    for _ in range(30):
        eng.step()
    assert got[-1] is not None and got[-1].finish_reason == "abort" and got.count(None) == 3
    assert eng.spec_metrics.drafted > 0 and eng.spec_metrics.accepted > 0
    assert eng.num_free_blocks == free and not eng.has_unfinished()


def test_admission_never_takes_the_engine_lock(model_dir):
    """Structural: while a step holds the engine lock (here: another thread holds it), the
    event loop admits a stream, aborts it and gets its final output without waiting."""
    eng = engine(model_dir, "ngram")
    held, release = threading.Event(), threading.Event()

    def hold():
        with eng._lock:
            held.set()
            release.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    held.wait(5)

    async def admit():
        t0 = time.perf_counter()
        stream = eng.stream_chat(CHAT, GREEDY)
        rid = eng.add_request(PROMPTS[0], GREEDY)
        assert eng.abort(rid) is True
        await stream.aclose()  # aborts: the final output arrives without the lock
        await asyncio.sleep(0.05)
        return time.perf_counter() - t0, stream

    try:
        elapsed, stream = asyncio.run(asyncio.wait_for(admit(), 5))
    finally:
        release.set()
    assert elapsed < 1.0 and stream.output is not None and stream.output.finish_reason == "abort"
    deadline = time.time() + 5
    while eng.has_unfinished() and time.time() < deadline:
        time.sleep(0.01)
    assert not eng.has_unfinished() and eng.num_free_blocks == eng.num_blocks


def test_break_and_cancel_abort_the_request(model_dir):
    eng = engine(model_dir, "ngram")
    long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)

    async def run():
        async for _ in eng.stream_chat(CHAT, long, request_id="b"):
            break
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not eng.is_running("b"):
                break
        broke = not eng.is_running("b")

        async def consume():
            async for _ in eng.stream_chat(CHAT, long, request_id="c"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return broke, eng.is_running("c")

    broke, still = asyncio.run(run())
    assert broke and not still
    deadline = time.time() + 5
    while eng.num_free_blocks != eng.num_blocks and time.time() < deadline:
        time.sleep(0.01)
    assert eng.num_free_blocks == eng.num_blocks


def test_prefill_ahead_hits_the_cache_and_never_evicts(model_dir):
    eng = engine(model_dir, "ngram")
    rid = eng.prefill(CHAT)
    deadline = time.time() + 5
    while eng.is_running(rid) and time.time() < deadline:
        time.sleep(0.01)
    n = len(eng.encode_chat(CHAT))
    out = eng.chat([CHAT], GREEDY)[0]
    assert out.num_cached_tokens == n - 1  # every token but the last: the full blocks, then the tail
    later = [*CHAT, {"role": "assistant", "content": "t40"}, {"role": "user", "content": "t41 t42"}]
    assert eng.chat([later], GREEDY)[0].num_cached_tokens >= (n - 1) // 8 * 8
    # a full cache: the prefill is dropped, the running request is neither preempted nor changed
    tiny = engine(model_dir, "ngram", num_blocks=8)
    ref = engine(model_dir).generate([PROMPTS[1]], GREEDY)[0].token_ids
    rid = tiny.add_request(PROMPTS[1], GREEDY, request_id="run")
    results = {}
    tiny.requests["run"].sink = lambda d, f: f and results.setdefault("run", f)
    tiny.step()
    big = [{"role": "user", "content": " ".join(f"t{i}" for i in range(50, 90))}]
    pid = tiny.prefill(big)
    while tiny.has_unfinished():
        tiny.step()
    assert results["run"].token_ids == ref and tiny.scheduler.num_preemptions == 0
    assert not tiny.is_running(pid) and tiny.num_free_blocks == 8


def test_sampled_distribution_through_the_step(model_dir):
    """Sampled tokens with speculation (greedy drafts of a draft model, here the target's own
    weights, accepted or rejected against the top-k filtered target) follow plain sampling's
    law: a two-sample chi-square on the 2nd and 3rd generated tokens."""
    import torch
    from scipy.stats import chi2_contingency

    prompt = PROMPTS[0]
    p = SamplingParams(max_tokens=3, temperature=1.0, top_k=6, ignore_eos=True)
    counts = {}
    for name, spec in (("plain", None), ("spec", "draft")):
        cfg = spec and SpeculativeConfig(method="draft", draft_model=str(model_dir), num_tokens=2, adaptive=False)
        eng = LLMEngine.from_pretrained(model_dir, speculative=cfg, num_blocks=1024, block_size=8,
                                        max_num_seqs=256, max_num_batched_tokens=8192)
        if spec:  # draft at batch 256 too (the CPU policy drafts only into the batch's free rows)
            eng._speculator().rows_per_pass = None
        torch.manual_seed(0 if spec is None else 1)
        outs = eng.generate([prompt] * 1024, p)
        counts[name] = [[o.token_ids[i] for o in outs] for i in (1, 2)]
        if spec:
            m = eng.spec_metrics
            assert m.drafted > 900 and 100 < m.accepted < m.drafted - 100  # accepts and rejects
    for pos in range(2):
        a, b = counts["plain"][pos], counts["spec"][pos]
        vocab = sorted(set(a) | set(b))
        table = [[a.count(t) for t in vocab], [b.count(t) for t in vocab]]
        keep = [j for j in range(len(vocab)) if table[0][j] + table[1][j] >= 10]  # chi-square needs mass
        assert len(keep) >= 3
        assert chi2_contingency([[row[j] for j in keep] for row in table]).pvalue > 1e-3


def test_controller_backs_off_in_a_batch():
    """The same per-row verify cost that pays at batch 1 does not pay at batch 4: a draft slows
    the other three sequences' step too."""
    from llm_engine.speculative.adaptive import AdaptiveDraftLength, StepCosts

    costs = StepCosts(draft_per_token=0.0)
    for rows in range(1, 9):
        costs.observe_verify(rows - 1, 0.010 * (1 + 0.5 * (rows - 1)))
    ctl = AdaptiveDraftLength(k_max=5, prior=0.6, probe_every=100)
    assert ctl.next_k(0.0, lambda k: costs.step_relative(1, k)) >= 1
    assert ctl.next_k(3.0, lambda k: costs.step_relative(4, k)) == 0


def test_cpu_drafts_fill_only_the_batch_weight_pass(model_dir, alone):
    """On the CPU a step streams the weights once per 8 rows: 8 decoding sequences leave no
    row for a draft, 4 leave 4."""
    eight = oracle_engine(model_dir, alone)
    outs = eight.generate(PROMPTS * 2, GREEDY)
    assert [o.token_ids for o in outs] == alone * 2 and eight.spec_metrics.drafted == 0
    four = oracle_engine(model_dir, alone)
    assert [o.token_ids for o in four.generate(PROMPTS, GREEDY)] == alone and four.spec_metrics.drafted > 0


def test_a_failing_step_ends_streams_with_a_typed_error(model_dir):
    from parley.errors import ParleyError

    eng = engine(model_dir, "ngram")
    real = eng.runner.run
    eng.runner.run = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))

    async def consume():
        return [d async for d in eng.stream_chat(CHAT, GREEDY)]

    with pytest.raises(ParleyError, match="boom"):
        asyncio.run(consume())
    assert eng.num_free_blocks == eng.num_blocks and not eng.has_unfinished()
    eng.runner.run = real  # the engine keeps serving
    assert len(eng.chat([CHAT], GREEDY)[0].token_ids) == GREEDY.max_tokens


def test_next_token_probability_matches_the_model_and_reuses_the_cache(tmp_path):
    import torch

    hf = make_tiny_llama(tmp_path, seed=7)
    eng = LLMEngine.from_pretrained(tmp_path, num_blocks=32, block_size=8)
    prompt = list(range(40, 61))  # 21 tokens: two full blocks to cache, a partial third
    with torch.no_grad():
        want = torch.softmax(hf(torch.tensor([prompt])).logits[0, -1].float(), -1)
    ids = [2, 17, 33]
    got = eng.next_token_probability(prompt, ids)
    assert got == pytest.approx(float(want[ids].sum()), rel=1e-4, abs=1e-6)
    assert eng.next_token_probability(prompt, [5]) == pytest.approx(float(want[5]), rel=1e-4, abs=1e-7)
    # nothing generated, every block back in the free pool (the full ones kept for the prefix cache)
    assert eng.num_free_blocks == eng.num_blocks and not eng.requests
    # the second call found the first one's two full blocks and its tail's first 4 tokens (the
    # last one is computed again: it gives the logits)
    assert eng.bm.num_hits == 20
    longer = [*prompt, 70, 71]
    with torch.no_grad():
        want2 = torch.softmax(hf(torch.tensor([longer])).logits[0, -1].float(), -1)
    assert eng.next_token_probability(longer, ids) == pytest.approx(float(want2[ids].sum()), rel=1e-4, abs=1e-6)
    with pytest.raises(ValueError, match="token_ids"):
        eng.next_token_probability(prompt, [])
    with pytest.raises(ValueError, match="token_ids"):
        eng.next_token_probability(prompt, [10_000])
    with pytest.raises(ValueError, match="timeout_s"):
        eng.next_token_probability(prompt, ids, timeout_s=0)


def test_score_prompt_gives_the_final_hidden_state_of_the_prompts_last_token(tmp_path):
    import torch

    hf = make_tiny_llama(tmp_path, seed=5)
    eng = LLMEngine.from_pretrained(tmp_path, num_blocks=32, block_size=8)
    prompt = list(range(30, 49))  # 19 tokens: the second call finds two full blocks cached
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), output_hidden_states=True)
    want_h = out.hidden_states[-1][0, -1].float()  # [H] after the final norm
    want_p = float(torch.softmax(out.logits[0, -1].float(), -1)[[2, 9]].sum())
    for _ in range(2):  # computed, then from the prefix cache
        scored = eng.score_prompt(prompt, [2, 9])
        assert scored.next_token_p == pytest.approx(want_p, rel=1e-4, abs=1e-6)
        assert scored.hidden.shape == want_h.shape and scored.hidden.dtype == torch.float32
        torch.testing.assert_close(scored.hidden, want_h, rtol=1e-4, atol=1e-4)
    assert eng.next_token_probability(prompt, [2, 9]) == scored.next_token_p
    assert eng.num_free_blocks == eng.num_blocks and not eng.requests


def test_next_token_probability_gives_none_when_the_engine_cannot_answer_in_time(model_dir):
    eng = engine(model_dir)
    with eng._lock:  # a long step holds the engine: the answer cannot come within the timeout
        assert eng.next_token_probability(PROMPTS[1], [3], timeout_s=0.05) is None
    deadline = time.time() + 5
    while eng.requests and time.time() < deadline:
        time.sleep(0.01)
    assert not eng.requests and eng.num_free_blocks == eng.num_blocks  # the aborted request is gone


@pytest.mark.parametrize("kind", ["engine", "fake"])
def test_close_ends_live_requests_frees_blocks_and_refuses_new_ones(model_dir, kind):
    from llm_engine import FakeLLM
    from parley.errors import EngineClosedError, ParleyError

    eng = engine(model_dir, "ngram") if kind == "engine" else FakeLLM(["a b c d e f g h i j"] * 1, token_s=0.05)
    long = SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True)
    ended: list = []
    eng.add_request("t5 t6 t7", long, sink=lambda d, final: final is not None and ended.append(final))
    got: list[str] = []

    async def run():
        async for delta in eng.stream_chat(CHAT, long, request_id="live"):
            got.append(delta)
            if len(got) == 2:
                await asyncio.to_thread(eng.close)

    with pytest.raises(ParleyError, match="closed"):
        asyncio.run(run())
    deadline = time.time() + 5
    while not ended and time.time() < deadline:
        time.sleep(0.01)
    # deltas already on their way when close() ran still arrive; then the stream raises
    assert len(got) >= 2 and [o.finish_reason for o in ended] == ["error"] and "closed" in ended[0].error
    assert eng.num_free_blocks == eng.num_blocks
    if kind == "engine":
        assert not eng.has_unfinished() and (eng._worker is None or not eng._worker.is_alive())
    with pytest.raises(EngineClosedError) as info:
        eng.add_request("t5", GREEDY)
    assert not info.value.retryable
    with pytest.raises(EngineClosedError):
        eng.chat([CHAT], GREEDY)
    eng.close()  # idempotent
