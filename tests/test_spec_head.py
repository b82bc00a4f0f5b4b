"""The EAGLE head: training matches drafting, drafts equal teacher-forced predictions, draft
vocabulary keeps outputs exact, and the cost-aware draft length."""

from __future__ import annotations

import functools
import operator

import pytest
import torch

from llm_engine.speculative import HeadDrafter, SpecRequest, SpeculativeDecoder
from llm_engine.speculative.adaptive import AdaptiveDraftLength, StepCosts
from llm_engine.speculative.head import EagleHead, HeadCache, HeadConfig
from llm_engine.speculative.train_head import two_step

TINY = HeadConfig(hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128)


@pytest.mark.unit
@torch.no_grad()
def test_two_step_training_rows_equal_incremental_drafting():
    torch.manual_seed(0)
    head = EagleHead(TINY).eval()
    t = 11
    g, emb = torch.randn(t, 64), torch.randn(t, 64)
    o1, o2 = two_step(head, g, emb)
    for i in (0, 4, t - 3):
        cache = HeadCache()  # drafting after real rows 0..i: step 1 from them, step 2 from its own output
        out = head(g[: i + 1], emb[1 : i + 2], torch.arange(i + 1), cache)
        torch.testing.assert_close(out[-1], o1[i], rtol=1e-4, atol=1e-4)
        nxt = head(out[-1][None], emb[i + 2][None], torch.tensor([i + 1]), cache)[0]
        torch.testing.assert_close(nxt, o2[i], rtol=1e-4, atol=1e-4)


@pytest.mark.unit
def test_head_cache_grows_in_place_and_rolls_back():
    cache = HeadCache()
    rows = [torch.randn(n, 2, 4) for n in (50, 30, 1)]  # past the first capacity (64)
    for r in rows:
        k, v = cache.append(r, -r)
    assert len(cache) == 81 and torch.equal(k, torch.cat(rows)) and torch.equal(v, -torch.cat(rows))
    cache.truncate(50)
    new = torch.randn(3, 2, 4)
    k, _ = cache.append(new, new)  # rolled-back rows are overwritten, the kept ones untouched
    assert len(cache) == 53 and torch.equal(k[:50], rows[0]) and torch.equal(k[50:], new)


@pytest.mark.unit
@torch.no_grad()
def test_cached_attention_native_equals_sdpa(monkeypatch):
    from kernels import cpu_ops

    torch.manual_seed(3)
    head = EagleHead(TINY).eval()
    q, k, v = torch.randn(4, 4, 16), torch.randn(20, 2, 16), torch.randn(20, 2, 16)
    if not cpu_ops.native_ok(q, k, v):
        pytest.skip("the C++ CPU ops did not build here")
    native = head._causal_cached(q, k, v)
    monkeypatch.setattr(cpu_ops, "native_ok", lambda *t: False)
    torch.testing.assert_close(native, head._causal_cached(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.unit
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_draft_vocabulary_drafts_only_its_ids_and_output_is_exact(temperature):
    from llm_engine.speculative.hf_target import HFTarget
    from tests.test_spec_decoder import _prompts, _tiny_llama

    target = HFTarget(_tiny_llama(0))
    torch.manual_seed(1)
    vocab = torch.arange(0, 96, 2)  # even ids only
    head = EagleHead(HeadConfig(hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
                                draft_vocab_size=len(vocab))).eval()
    head.draft_vocab.copy_(vocab)
    w, eps = target.norm()
    drafter = HeadDrafter(head, target.embed_weight(), target.lm_head_weight(), w, eps, temperature=temperature)
    proposed = []
    orig = drafter.propose

    def spy(seq_id, ctx, k):
        d = orig(seq_id, ctx, k)
        proposed.extend(d.token_ids)
        if d.probs is not None:  # q is a distribution over the full vocabulary, 0 off the subset
            assert d.probs.shape[1] == 96 and float(d.probs[:, 1::2].sum()) == 0.0
        return d

    drafter.propose = spy
    prompts = _prompts(2)
    reqs = [SpecRequest(f"r{i}", p, max_tokens=24, temperature=temperature, seed=i) for i, p in enumerate(prompts)]
    SpeculativeDecoder(target, drafter, k_max=3).generate(reqs)
    assert proposed and all(t % 2 == 0 for t in proposed)
    if temperature == 0.0:
        plain = [SpecRequest(f"p{i}", p, max_tokens=24) for i, p in enumerate(prompts)]
        SpeculativeDecoder(target, None).generate(plain)
        assert [r.output for r in reqs] == [r.output for r in plain]


@pytest.mark.unit
def test_step_costs_drive_draft_length():
    flat = StepCosts()
    for k, ms in ((0, 26.6), (1, 27.0), (5, 30.0)):
        flat.observe_verify(k, ms / 1e3)
    flat.observe_draft(4, 4 * 0.4e-3)  # cheap drafter: 0.4 ms per token
    assert flat.relative(0) == 1.0
    base = flat.relative(0)
    assert base < flat.relative(3) < flat.relative(5) < 1.3 * base
    cheap = AdaptiveDraftLength(k_max=5, prior=0.7, cost=flat.relative)
    assert cheap.next_k() == 5

    steep = StepCosts()
    for k, ms in ((0, 26.0), (2, 60.0)):  # a verify pass costing 2.3x at 3 query rows
        steep.observe_verify(k, ms / 1e3)
    steep.observe_draft(2, 2 * 10e-3)  # and a drafter at 40% of a target pass per token
    costly = AdaptiveDraftLength(k_max=5, prior=0.5, cost=steep.relative, probe_every=100)
    assert costly.next_k() == 0  # drafting would cost more than it saves
    # no plain step measured yet: verify(0) extrapolated from the drafted lengths
    only = StepCosts()
    only.observe_verify(2, 0.030)
    only.observe_verify(6, 0.034)
    assert only.base() == pytest.approx(0.028)


@pytest.mark.unit
def test_acceptance_rate_is_per_token():
    c = AdaptiveDraftLength(k_max=5, decay=0.0)
    c.update(5, 2)  # two kept, the third rejected: 2 successes in 3 trials
    assert c.rate == pytest.approx(2 / 3)
    c.update(4, 4)
    assert c.rate == 1.0


@pytest.fixture(scope="module")
def engine():
    from llm_engine import LLMEngine

    torch.set_num_threads(1)
    return LLMEngine.from_pretrained(enable_prefix_caching=False)


@pytest.mark.integration
@pytest.mark.slow
@torch.no_grad()
def test_head_drafts_equal_teacher_forced_predictions(engine):
    """In decoding (k=1), every drafted token must be the head's teacher-forced prediction at
    that position of the same text: features, next-token embeddings and positions aligned,
    the head's KV rolled back after each draft."""
    from llm_engine.speculative import load_head
    from llm_engine.speculative.engine_target import EngineTarget

    target = EngineTarget(engine)
    w, eps = target.norm()
    drafter = HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps)
    msgs = [{"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What's a good way to learn to cook?"}]
    prompt = engine.encode_chat(msgs)
    drafts: list[tuple[int, int]] = []  # (context length, drafted token)
    orig = drafter.propose

    def spy(seq_id, ctx, k):
        d = orig(seq_id, ctx, k)
        drafts.extend((len(ctx), t) for t in d.token_ids)
        return d

    drafter.propose = spy
    r = SpecRequest("tf", prompt, max_tokens=40, stop_ids=tuple(engine.eos_token_ids))
    dec = SpeculativeDecoder(target, drafter, k_max=1, adaptive=False)
    dec.generate([r])
    full = prompt + r.output
    feats, _ = target.extend("ref", full)
    target.release("ref")
    g = drafter._normed(feats)
    pred = drafter.head(g[:-1], drafter.embed[torch.tensor(full[1:])].float(), torch.arange(len(full) - 1))
    tf = [drafter._pick(p)[0] for p in pred]  # row t predicts token t + 2
    assert len(drafts) >= 10
    same = sum(tf[n - 2] == tok for n, tok in drafts)
    assert same >= len(drafts) - 1  # one near-tie flip allowed (batched vs incremental fp32)
    assert dec.metrics.accepted == sum(full[n] == tok for n, tok in drafts)


@pytest.mark.unit
def test_children_walk_is_the_greedy_draft_and_ranks_by_log_probability():
    """children(path) is the head's expansion of one draft-tree node: walking its top child k
    times gives propose(k) exactly, and its log-probabilities come sorted and normalized."""
    from llm_engine.speculative.hf_target import HFTarget
    from tests.test_spec_decoder import _prompts, _tiny_llama

    target = HFTarget(_tiny_llama(0))
    torch.manual_seed(2)
    w, eps = target.norm()
    drafter = HeadDrafter(EagleHead(TINY).eval(), target.embed_weight(), target.lm_head_weight(), w, eps)
    ctx = _prompts(1)[0]
    feats, _ = target.extend("s", ctx)
    assert drafter.children("s", [*ctx, 5], (), 3) == []  # nothing verified yet
    drafter.accepted("s", [*ctx, 5], features=feats)
    path: tuple[int, ...] = ()
    for _ in range(4):
        kids = drafter.children("s", [*ctx, 5], path, 3)
        lps = [lp for _, lp in kids]
        assert len(kids) == 3 and lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
        path += (kids[0][0],)
    assert drafter.propose("s", [*ctx, 5], 4).token_ids == list(path)
    full = drafter.children("s", [*ctx, 5], path[:2], 10_000)  # the whole vocabulary
    assert abs(sum(torch.tensor([lp for _, lp in full]).exp().tolist()) - 1.0) < 1e-4


@pytest.mark.unit
def test_train_fraction_trains_on_a_share_and_keeps_the_held_out_chats(monkeypatch):
    """The data-scaling probe (train_head --train-fraction): fewer training chats, every step
    drawn from them, and the same held-out chats as the full run."""
    from llm_engine.speculative import train_head as th

    g = torch.Generator().manual_seed(0)
    n, d, v = 32, 576, 40
    data = {"tokens": [torch.randint(0, v, (6,), generator=g) for _ in range(n)],
            "features": [torch.randn(6, d, generator=g) for _ in range(n)],
            "reply_start": [2] * n, "labels": [torch.randint(0, v, (6,), generator=g) for _ in range(n)]}
    tw = {"norm": torch.ones(d), "eps": 1e-5, "embed": torch.randn(v, d, generator=g),
          "vocab": torch.arange(v), "w_sub": torch.randn(v, d, generator=g)}
    seen: list[list[int]] = []
    real = th.head_loss
    monkeypatch.setattr(th, "head_loss", lambda head, data, idx, tw, *a: seen.append(list(idx)) or real(head, data, idx, tw, *a))
    _, full = th.train(data, tw, steps=3, seed=0)
    val_full, train_full = seen[-1], set(functools.reduce(operator.iadd, seen[:-1], []))
    seen.clear()
    _, part = th.train(data, tw, steps=3, seed=0, train_fraction=0.25)
    assert (full["train_seqs"], part["train_seqs"]) == (30, 8) and full["val_seqs"] == part["val_seqs"] == 2
    assert seen[-1] == val_full  # the same held-out chats are scored
    used = set(functools.reduce(operator.iadd, seen[:-1], []))
    assert len(used) <= 8 and not used & set(val_full) and train_full - used
