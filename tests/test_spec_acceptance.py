"""The acceptance rule preserves the target distribution exactly (chi-square on a tiny vocab)."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import chisquare

from llm_engine.speculative import (
    AdaptiveDraftLength,
    DraftModelDrafter,
    SpecRequest,
    SpeculativeDecoder,
    accept_greedy,
    accept_sampled,
)

V = 4


class BigramTarget:
    """A tiny 'model' whose next-token logits depend on the previous token only."""

    def __init__(self, logits: torch.Tensor) -> None:  # [V, V]
        self.table, self.vocab_size = logits, logits.shape[0]
        self.seqs: dict[str, list[int]] = {}

    def extend(self, seq_id, token_ids):
        s = self.seqs.setdefault(seq_id, [])
        s.extend(token_ids)
        logits = self.table[torch.tensor(token_ids)]
        return torch.zeros(len(token_ids), 1), logits

    def truncate(self, seq_id, length):
        del self.seqs.setdefault(seq_id, [])[length:]

    def release(self, seq_id):
        self.seqs.pop(seq_id, None)

    def length(self, seq_id):
        return len(self.seqs.get(seq_id, []))


def _exact(table: torch.Tensor, start: int, n: int) -> dict[tuple, float]:
    p = torch.softmax(table, -1)
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        prob, prev = 1.0, start
        for t in seq:
            prob *= float(p[prev, t])
            prev = t
        out[seq] = prob
    return out


@pytest.mark.unit
@pytest.mark.slow
@pytest.mark.parametrize("quality", ["bad", "good"])
def test_sampled_output_distribution_equals_target(quality):
    g = torch.Generator().manual_seed(1)
    table = torch.randn(V, V, generator=g) * 1.5
    drafter_table = -table if quality == "bad" else table + 0.3 * torch.randn(V, V, generator=g)
    target = BigramTarget(table)
    drafter = DraftModelDrafter(BigramTarget(drafter_table), temperature=1.0, seed=7)
    dec = SpeculativeDecoder(target, drafter, k_max=3, adaptive=False)
    n_tok, n_samples = 3, 20000
    counts: dict[tuple, int] = {}
    for i in range(n_samples):
        r = SpecRequest(f"s{i}", [0], max_tokens=n_tok, temperature=1.0, seed=i)
        dec.generate([r])
        key = tuple(r.output)
        counts[key] = counts.get(key, 0) + 1
    exact = _exact(table, 0, n_tok)
    keys = sorted(exact)
    obs = [counts.get(k, 0) for k in keys]
    z = sum(exact.values())
    exp = [exact[k] / z * n_samples for k in keys]
    assert sum(obs) == n_samples
    assert chisquare(obs, exp).pvalue > 1e-3
    rate = dec.metrics.acceptance_rate
    assert (rate > 0.6) if quality == "good" else (rate < 0.45)
    assert target.seqs == {}  # every sequence released


@pytest.mark.unit
def test_residual_is_exact_one_step():
    """Exact enumeration: P(first token = x) = q(x) min(1, p/q) + P(reject) residual(x) = p(x)."""
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.6, 0.2, 0.1]])
    accept = torch.minimum(torch.ones(V), p[0] / q[0])
    resid = (p[0] - q[0]).clamp_min(0)
    resid = resid / resid.sum()
    p_rej = 1 - float((q[0] * accept).sum())
    total = q[0] * accept + p_rej * resid
    torch.testing.assert_close(total, p[0])
    counts = torch.zeros(V)
    g = torch.Generator().manual_seed(0)
    for _ in range(4000):
        x = torch.multinomial(q[0], 1, generator=g)
        counts[accept_sampled(x, q, p, g).tokens[0]] += 1
    assert chisquare(counts.tolist(), (p[0].double() / p[0].double().sum() * 4000).tolist()).pvalue > 1e-3


@pytest.mark.unit
def test_greedy_rule_and_bonus():
    logits = torch.tensor([[0.0, 3, 0], [5.0, 0, 0], [0, 0, 9.0]])
    a = accept_greedy(torch.tensor([1, 0]), logits)
    assert (a.accepted, a.tokens) == (2, [1, 0, 2])  # all kept + bonus
    a = accept_greedy(torch.tensor([1, 2]), logits)
    assert (a.accepted, a.tokens) == (1, [1, 0])  # correction replaces the miss
    a = accept_greedy(torch.tensor([], dtype=torch.long), logits[:1])
    assert a.tokens == [1]
    with pytest.raises(ValueError):
        accept_greedy(torch.tensor([1]), logits)


@pytest.mark.unit
def test_adaptive_length_backs_off_and_probes():
    c = AdaptiveDraftLength(k_max=5, draft_cost=0.05)
    assert c.next_k() >= 2
    for _ in range(30):
        c.update(c.next_k() or 1, 0)
    ks = [c.next_k() for _ in range(16)]
    assert ks.count(0) >= 12 and 1 in ks  # plain decoding, with occasional probes
    for _ in range(30):
        c.update(5, 5)
    assert c.next_k() == 5
    with pytest.raises(ValueError):
        AdaptiveDraftLength(k_max=-1)
