from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from tests.speech import espeak_available, espeak_speech, piper_speech, with_silence
from turn_detection import EndOfTurn, EndOfTurnDetector, EndpointingPolicy, FakeEndOfTurnDetector
from turn_detection.training.make_dataset import make_clip

TEXTS = (
    "Please book me a window seat on the early train to Denver.",
    "Remind me to buy flowers for my mother on the way home.",
)
needs_espeak = pytest.mark.skipif(not espeak_available(), reason="espeak-ng binary not installed")


@pytest.fixture(scope="module")
def detector():
    return EndOfTurnDetector.load()


def _trim(audio: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > 1e-3)
    return np.array(audio[loud[0] : loud[-1] + 1])


def _first_event(stream, audio: np.ndarray, frame: int = 320) -> EndOfTurn | None:
    for i in range(0, len(audio), frame):
        ev = stream.push(audio[i : i + frame])
        if ev is not None:
            return ev
    return None


def _speech(voice: str, text: str) -> np.ndarray:
    if voice == "piper":
        return _trim(piper_speech(text))
    return _trim(espeak_speech(text, voice=voice, wpm=165))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("voice", ["piper", pytest.param("en-us+f3", marks=needs_espeak)])
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("kind", ["complete", "paused"])
def test_fires_after_the_turn_not_in_its_pause(detector, voice, text, kind):
    audio, meta = make_clip(_speech(voice, text), kind, np.random.default_rng(1))
    ev = _first_event(detector.stream(), audio)
    assert ev is not None, "no decision after the utterance"
    assert ev.time_s >= meta["turn_end"], f"cut off at {ev.time_s:.2f} s, turn ends {meta['turn_end']:.2f} s"
    assert ev.time_s <= meta["turn_end"] + detector.policy.max_wait_s + 0.2
    assert 0.0 <= ev.probability <= 1.0


@pytest.mark.integration
def test_reset_isolates_turns(detector):
    audio = with_silence(_speech("piper", TEXTS[0]), 0.3, 2.0)
    stream = detector.stream()
    first = _first_event(stream, audio)
    assert first is not None
    assert _first_event(stream, np.zeros(16000, dtype=np.float32)) is None  # once per turn
    stream.reset()
    assert _first_event(stream, np.zeros(3 * 16000, dtype=np.float32)) is None  # silence alone never ends a turn
    stream.reset()
    again = _first_event(stream, audio, frame=777)  # any frame length
    assert again is not None
    assert abs(again.time_s - first.time_s) < 0.06  # stream time restarts at reset
    assert again.probability == pytest.approx(first.probability, abs=0.05)


@pytest.mark.integration
def test_unfinished_transcript_waits_longer(detector):
    det = detector.with_policy(replace(detector.policy, text_weight=2.0))
    audio = with_silence(_speech("piper", TEXTS[1]), 0.3, 2.5)
    plain, cued, whole = det.stream(), det.stream(), det.stream()
    cued.push_transcript("remind me to buy flowers for my mother on the way and")
    whole.push_transcript(TEXTS[1])
    a, b, c = _first_event(plain, audio), _first_event(cued, audio), _first_event(whole, audio)
    assert a is not None and b is not None and c is not None
    assert b.probability < a.probability < c.probability
    assert b.time_s > a.time_s >= c.time_s
    ev = cued.evaluations[-1]
    assert ev.text_probability is not None and ev.text_probability < 0.1
    assert ev.probability == pytest.approx(det.policy.combine(ev.audio_probability, ev.text_probability))


@pytest.mark.integration
@pytest.mark.parametrize("bad", [np.full(320, np.nan, dtype=np.float32), np.zeros(320, dtype=np.int8),
                                 np.zeros(320, dtype=np.complex64)])
def test_bad_frames_raise(detector, bad):
    with pytest.raises(ValueError):
        detector.stream().push(bad)
    with pytest.raises(ValueError):
        detector.stream().push_transcript(3)


@pytest.mark.unit
def test_policy_waits():
    p = EndpointingPolicy(min_wait_s=0.1, max_wait_s=1.5, high=0.8, low=0.2)
    assert p.wait_s(0.9) == 0.1 and p.wait_s(0.1) == 1.5
    assert 0.1 < p.wait_s(0.5) < 1.5
    with pytest.raises(ValueError):
        EndpointingPolicy(min_wait_s=2.0, max_wait_s=1.0)
    with pytest.raises(ValueError):
        EndpointingPolicy(high=0.2, low=0.5)


@pytest.mark.unit
def test_policy_combines_audio_and_text_in_log_odds():
    p = EndpointingPolicy(audio_weight=0.5, text_weight=2.0, text_bias=-1.0)
    assert p.combine(0.7, None) == pytest.approx(1 / (1 + (0.3 / 0.7) ** 0.5))  # no transcript: audio alone
    assert p.combine(0.5, 0.5) == pytest.approx(1 / (1 + np.e))  # both undecided: the bias
    assert p.combine(0.5, 0.9) > p.combine(0.5, 0.5) > p.combine(0.5, 0.1)
    many = p.combine_many(np.array([0.7, 0.5]), np.array([np.nan, 0.9]))
    assert many == pytest.approx([p.combine(0.7, None), p.combine(0.5, 0.9)])
    assert EndpointingPolicy().combine(0.42, 0.01) == pytest.approx(0.42)  # text_weight 0: audio only
    with pytest.raises(ValueError):
        EndpointingPolicy(text_weight=-1.0)


@pytest.mark.unit
def test_fake_detector_timing():
    fake = FakeEndOfTurnDetector(silence_s=0.2, push_delay_s=0.002)
    s = fake.stream()
    tone = (0.1 * np.sin(np.arange(320) * 0.2)).astype(np.float32)
    silence = np.zeros(320, dtype=np.float32)
    assert all(s.push(tone) is None for _ in range(10))
    t0 = time.perf_counter()
    events = [s.push(silence) for _ in range(15)]
    assert time.perf_counter() - t0 >= 15 * 0.002
    fired = [e for e in events if e is not None]
    assert len(fired) == 1 and fired[0].time_s == pytest.approx(0.2 + 0.2, abs=0.021)
    with pytest.raises(ValueError):
        s.push(np.full(10, np.inf, dtype=np.float32))


def _push_with_probs(stream, audio: np.ndarray, probs: np.ndarray, frame: int):
    """Push `audio` in `frame`-sample frames, handing each push the probabilities of the
    512-sample windows it completes (counted over the whole stream)."""
    done, events = 0, []
    for i in range(0, len(audio), frame):
        n = (i + len(audio[i : i + frame])) // 512
        events.append(stream.push(audio[i : i + frame], speech_probs=probs[done:n]))
        done = n
    return events


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["complete", "paused"])
def test_shared_speech_probs_give_the_same_decisions(detector, kind):
    audio, _ = make_clip(_speech("piper", TEXTS[0]), kind, np.random.default_rng(2))
    probs = detector.vad.probabilities(audio)
    for frame in (320, 777):
        own, shared = detector.stream(), detector.stream()
        by_model = [own.push(audio[i : i + frame]) for i in range(0, len(audio), frame)]
        by_probs = _push_with_probs(shared, audio, probs, frame)
        assert any(e is not None for e in by_model)
        assert by_probs == by_model
        assert [e.time_s for e in shared.evaluations] == [e.time_s for e in own.evaluations]


@pytest.mark.integration
def test_wrong_speech_prob_count_raises_and_changes_nothing(detector):
    stream = detector.stream()
    assert stream.push(np.zeros(300, dtype=np.float32), speech_probs=[]) is None  # no window completed
    frame = np.zeros(800, dtype=np.float32)  # 300 + 800 = 1100 samples: 2 windows
    for bad in ([0.1], [0.1, 0.2, 0.3], [0.1, float("nan")], [0.1, 1.2]):
        with pytest.raises(ValueError):
            stream.push(frame, speech_probs=bad)
    assert stream._pushed == 300 and stream._vad.windows == 0
    stream.push(frame, speech_probs=[0.1, 0.2])
    assert stream._vad.windows == 2 and stream._vad.last_probability == pytest.approx(0.2)
    fake = FakeEndOfTurnDetector().stream()
    with pytest.raises(ValueError):
        fake.push(np.zeros(1024, dtype=np.float32), speech_probs=[0.5])
    assert fake.push(np.zeros(1024, dtype=np.float32), speech_probs=[0.5, 0.5]) is None


class _Pending:
    """A non-blocking text scorer (pipeline.turn_text.BackgroundScorer's `peek`): None until
    its P is ready."""

    def __init__(self) -> None:
        self.ready: float | None = None
        self.peeks = 0

    def peek(self, text: str) -> float | None:
        self.peeks += 1
        return self.ready

    def probability(self, text: str) -> float:
        raise AssertionError("a scorer with peek is never asked to block")


@pytest.mark.integration
def test_a_pending_text_score_holds_the_turn_and_the_pushing_thread_does_not_wait(detector):
    policy = replace(detector.policy, audio_weight=1.0, text_weight=1.0, text_bias=0.0)
    scorer = _Pending()
    stream = detector.with_text_scorer(scorer, policy).stream()
    audio = with_silence(_speech("piper", TEXTS[0]), 0.3, 3.0)
    speech_end = len(audio) - 3 * 16000
    probs = [0.9 if (i + 1) * 512 <= speech_end else 0.0 for i in range(len(audio) // 512)]
    stream.push_transcript(TEXTS[0])
    assert all(e is None for e in _push_with_probs(stream, audio, probs, 320))  # 3 s, past max_wait
    assert scorer.peeks > 50 and stream.evaluations == []  # asked at every window, never decided
    scorer.ready = 0.99
    event = stream.push(np.zeros(512, dtype=np.float32), speech_probs=[0.0])
    assert event is not None and stream.evaluations[-1].text_probability == 0.99
