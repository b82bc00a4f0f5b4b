"""The policy search's bookkeeping: replay on filtered windows, the trace cache, validation halves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from turn_detection import EndpointingPolicy
from turn_detection.training import tune
from turn_detection.training.tune import (
    FeatureTrace,
    Trace,
    decision,
    grid,
    halves,
    held_out_cap,
    sweep,
)

W = 0.032


def _trace(rng: np.random.Generator) -> Trace:
    """Speech, a pause of random length (P known after the first window), speech, a long tail."""
    sil, prob = [], []
    for speech_w, pause_w in ((rng.integers(10, 40), rng.integers(5, 35)), (20, 90)):
        sil += [math.nan] * int(speech_w)
        sil += [W * (i + 1) for i in range(int(pause_w))]
        p = float(rng.uniform(0, 1))
        prob += [math.nan] * int(speech_w) + [math.nan] + [p] * (int(pause_w) - 1)
    t = W * np.arange(1, len(sil) + 1)
    return Trace(t, np.array(sil), np.array(prob), turn_end=float(t[-90] - W))


@pytest.mark.unit
def test_sweep_on_filtered_windows_matches_the_plain_replay():
    rng = np.random.default_rng(0)
    traces = [_trace(rng) for _ in range(40)]
    policies = [*grid()[::97], EndpointingPolicy(min_wait_s=0.064, max_wait_s=0.5, high=0.01, low=0.0)]
    from benchmarks.turn import score_times

    results = sweep(traces, policies)
    assert len(results) == len(policies)
    for policy, got in results:
        plain = [decision(tr, policy) for tr in traces]
        assert got == score_times(plain, [tr.turn_end for tr in traces]), policy
    assert any(0 < s["false_cutoff_rate"] < 1 for _, s in results)  # the traces exercise both outcomes


@pytest.mark.unit
def test_feature_trace_cache_round_trips(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    made = [FeatureTrace(np.arange(n) * W, rng.uniform(0, 2, n), rng.integers(-1, k, n),
                         rng.normal(size=(k, 18)), float(rng.uniform(1, 3)))
            for n, k in ((30, 1), (50, 3), (7, 2))]
    calls = []
    monkeypatch.setattr(tune, "feature_traces", lambda vad, seed, split_name: calls.append(seed) or made)
    first = tune.cached_feature_traces(None, 5, tmp_path)
    again = tune.cached_feature_traces(None, 5, tmp_path)
    assert calls == [5]  # the second call read the cache
    for a, b in zip(made, again, strict=True):
        for field in ("time_s", "silence_s", "pause", "features"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert a.turn_end == b.turn_end
    assert first is made
    tune.cached_feature_traces(None, 6, tmp_path)
    assert calls == [5, 6]  # another seed is another entry


@pytest.mark.unit
def test_validation_halves_share_no_voice_and_no_sentence():
    n_voices, n_sents, repeats = 5, 7, 3
    half = halves(n_voices, n_sents, repeats).reshape(repeats, n_voices, n_sents, 2)
    assert np.all(half == half[:1]) and np.all(half[..., 0] == half[..., 1])  # per utterance
    h = half[0, :, :, 0]
    for k in (0, 1):
        other = 1 - k
        voices_k = {v for v in range(n_voices) if (h[v] == k).any()}
        voices_o = {v for v in range(n_voices) if (h[v] == other).any()}
        sents_k = {s for s in range(n_sents) if (h[:, s] == k).any()}
        sents_o = {s for s in range(n_sents) if (h[:, s] == other).any()}
        assert voices_k and sents_k and not voices_k & voices_o and not sents_k & sents_o


@pytest.mark.unit
def test_held_out_cap_is_one_of_the_caps_and_respects_the_target():
    rng = np.random.default_rng(2)
    traces = [_trace(rng) for _ in range(2 * 2 * 4 * 3)]
    half = halves(2, 4, 3)
    caps = (0.0, 0.1, 0.3, 1.0)
    cap, rows = held_out_cap(traces, half, grid()[::50], caps, target=0.2)
    assert cap in caps and len(rows) == len(caps)
    fcs = [fc for fc, _ in rows]
    ok = [c for i, c in enumerate(caps) if max(fcs[: i + 1]) <= 0.2]
    assert cap == (max(ok) if ok else min(caps))



def _final_sounding_pause_trace() -> FeatureTrace:
    """Speech, a 0.64 s mid-turn pause that sounds as final as the real end, speech, the end."""
    sil, pause = [], []
    for k, pause_w in enumerate((20, 90)):
        sil += [math.nan] * 20 + [W * (i + 1) for i in range(pause_w)]
        pause += [-1] * 21 + [k] * (pause_w - 1)
    t = W * np.arange(1, len(sil) + 1)
    feats = np.zeros((2, 18))
    feats[:, 0] = 3.0  # the classifier below reads feature 0 as "finished"
    return FeatureTrace(t, np.array(sil), np.array(pause), feats, turn_end=float(t[-90] - W))


@pytest.mark.unit
def test_choose_skips_a_model_size_no_policy_can_use(monkeypatch):
    from turn_detection.training import train

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 18))
    y = (x[:, 0] > 0).astype(float)
    traces = [_final_sounding_pause_trace() for _ in range(5)]
    # a sharp classifier ends every clip in its mid-turn pause (no policy holds 0% false
    # cutoffs); one regularized to a constant P = 0.5 lets the cautious policies wait it out
    monkeypatch.setattr(train, "GRID", ((8, 3.0), (8, 1e6)))
    _, entry, _, score, cap = train.choose(x, y, x, y, traces, None, 0, max_fc=0.0)
    assert entry == (8, 1e6) and score["false_cutoff_rate"] == 0.0 and cap == 0.0
    monkeypatch.setattr(train, "GRID", ((8, 3.0),))
    with pytest.raises(ValueError, match="no model size"):
        train.choose(x, y, x, y, traces, None, 0, max_fc=0.0)
