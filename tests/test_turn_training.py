from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from benchmarks.turn import FRAME, sweep_policy
from tests.speech import piper_speech
from turn_detection import EndOfTurnDetector, EndpointingPolicy
from turn_detection.policy import DEFAULT_POLICY
from turn_detection.training import sentences
from turn_detection.training.data import SPLITS, split
from turn_detection.training.make_dataset import make_clip
from turn_detection.training.tune import decision, trace


@pytest.mark.unit
def test_splits_are_disjoint_in_sentences_and_voices():
    parts = {name: split(name) for name in SPLITS}
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not set(parts[a][0]) & set(parts[b][0]), f"{a} and {b} share sentences"
                assert not {v.label for v in parts[a][1]} & {v.label for v in parts[b][1]}, f"{a}/{b} share voices"
    assert len(set(sentences.TRAIN)) == len(sentences.TRAIN) >= 400
    assert len(set(sentences.VALIDATION)) == len(sentences.VALIDATION) >= 100 and len(sentences.TEST) == 10
    assert len(parts["train"][1]) >= 20 and len(parts["validation"][1]) >= 12
    for name in SPLITS:  # both engines in every split
        assert {v.engine for v in parts[name][1]} == {"piper", "espeak"}
    with pytest.raises(ValueError):
        split("held-out")


@pytest.mark.unit
def test_the_test_split_is_the_one_of_the_first_model_card():
    """Its sentences and voices (and the seed) never change, so test figures stay comparable."""
    sents, voices = split("test")
    assert hashlib.sha1("\n".join(sents).encode()).hexdigest() == "ed1fdb0993bfb02bb220af8291499b84df86e7b3"
    assert [v.label for v in voices] == ["piper-joe-1", "piper-joe-1.25", "espeak-en-us_f3-165",
                                         "espeak-en-gb-scotland-175", "espeak-en-029-185"]


@pytest.mark.unit
@pytest.mark.parametrize("curve", [0.5, 1.0, 2.0])
def test_threshold_falls_with_silence_and_matches_wait(curve):
    p = EndpointingPolicy(eval_silence_s=0.032, min_wait_s=0.1, max_wait_s=1.2, high=0.9, low=0.2, curve=curve)
    s = np.arange(0.0, 1.5, 0.032)
    thr = p.thresholds(s)
    assert np.all(np.isinf(thr[s < 0.1])) and np.all(thr[s >= 1.2] == 0.0)
    live = (s >= 0.1) & (s < 1.2)
    assert np.all(np.diff(thr[live]) < 0) and p.threshold(0.1) == pytest.approx(0.9)
    assert np.isinf(p.thresholds(np.array([np.nan]))[0])  # speaking: never
    for prob in (0.05, 0.3, 0.5, 0.75, 0.95):
        wait = p.wait_s(prob)
        fires = [x for x in s if p.should_end(prob, x)]
        assert fires[0] == pytest.approx(wait, abs=0.033), (prob, wait)  # first window past the wait
        assert not p.should_end(prob, wait - 0.01)


@pytest.mark.unit
def test_policy_save_load_and_validation(tmp_path):
    p = EndpointingPolicy(high=0.8, low=0.1, curve=2.0)
    p.save(tmp_path / "p.json")
    assert EndpointingPolicy.load(tmp_path / "p.json") == p
    (tmp_path / "bad.json").write_text(json.dumps({"hihg": 0.5}))
    with pytest.raises(ValueError):
        EndpointingPolicy.load(tmp_path / "bad.json")
    with pytest.raises(ValueError):
        EndpointingPolicy(curve=0.0)
    shipped = EndpointingPolicy.load(DEFAULT_POLICY)  # the file the tune script wrote
    assert shipped.max_wait_s <= 2.0 and shipped.high > shipped.low


@pytest.mark.unit
def test_sweep_moves_both_bars_in_order():
    base = EndpointingPolicy(high=0.8, low=0.2)
    lo, hi = sweep_policy(base, -1.0), sweep_policy(base, 1.0)
    assert lo.high < base.high < hi.high and lo.low < base.low < hi.low
    assert sweep_policy(base, 5.0).low < sweep_policy(base, 5.0).high <= 1.0


@pytest.fixture(scope="module")
def detector():
    return EndOfTurnDetector.load()


def _clip(kind: str):
    speech = np.array(piper_speech("Remind me to buy flowers for my mother on the way home."))
    loud = np.flatnonzero(np.abs(speech) > 1e-3)
    return make_clip(speech[loud[0] : loud[-1] + 1], kind, np.random.default_rng(3))


def _event_time(stream, audio):
    for i in range(0, len(audio), FRAME):
        ev = stream.push(audio[i : i + FRAME])
        if ev is not None:
            return ev.time_s
    return None


@pytest.mark.integration
def test_load_uses_the_shipped_policy(detector):
    assert detector.policy == EndpointingPolicy.load(DEFAULT_POLICY)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["complete", "paused"])
def test_tune_replay_matches_the_real_stream(detector, kind):
    """The policy search replays one trace; it must decide exactly when the stream does."""
    audio, meta = _clip(kind)
    tr = trace(detector, audio, meta["turn_end"])
    policies = [detector.policy, EndpointingPolicy(eval_silence_s=0.032, min_wait_s=0.064, high=0.99, low=0.98),
                EndpointingPolicy(min_wait_s=0.2, max_wait_s=0.8, high=0.5, low=0.05, curve=2.0),
                EndpointingPolicy(min_wait_s=0.064, max_wait_s=0.5, high=0.01, low=0.0)]
    for policy in policies:
        real = _event_time(EndOfTurnDetector(detector.vad, detector.classifier, policy).stream(), audio)
        assert real is not None
        assert decision(tr, policy) == pytest.approx(real, abs=1e-6), policy


@pytest.mark.integration
def test_transcript_arriving_in_the_pause_is_used(detector):
    """P is re-derived when new evidence comes during the pause, not frozen at the first call."""
    audio, meta = _clip("complete")
    policy = EndpointingPolicy(min_wait_s=0.3, max_wait_s=1.5, high=0.5, low=0.01, text_weight=3.0)
    det = detector.with_policy(policy)
    plain = _event_time(det.stream(), audio)
    stream = det.stream()
    half = int((meta["turn_end"] + 0.15) * 16000)  # speech over, classifier already called
    assert _event_time(stream, audio[:half]) is None and stream.probability is not None
    stream.push_transcript("remind me to buy flowers for my mother on the way and")
    late = _event_time(stream, audio[half:])
    assert stream.probability < 0.01  # the unfinished text took P below the lowest bar
    assert plain is not None and late is not None
    assert late - meta["turn_end"] >= policy.max_wait_s - 0.05 > plain - meta["turn_end"]
