from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.turn import Clip, run_ours, score
from parley.wav import read_wav
from turn_detection import EndOfTurnDetector
from turn_detection.completeness import normalize
from turn_detection.policy import EndpointingPolicy
from turn_detection.training.families import FAMILIES, FAMILY_NAMES, family_sentences
from turn_detection.training.loso import choose, rates, text_probabilities
from turn_detection.training.sentences import TEST, TRAIN, VALIDATION
from turn_detection.training.tune import Trace

W = 0.032
CLIPS = Path(__file__).parent / "data" / "turn_families"


@pytest.mark.unit
def test_family_sentences_are_in_no_other_set():
    fam = {" ".join(normalize(s)) for s in family_sentences()}
    other = {" ".join(normalize(s)) for s in TRAIN + VALIDATION + TEST}
    assert len(fam) == 48 and not fam & other
    assert {v.engine for v in FAMILIES["flite"]} == {"flite"} and len(FAMILIES["festival"]) == 3


class _Scorer:
    def probability(self, text: str) -> float:
        return 0.9 if text.endswith(".") else 0.1


@pytest.mark.unit
def test_text_probability_is_the_newest_transcript_arrived_by_each_window():
    t = W * np.arange(1, 11)
    tr = Trace(t, np.full(10, math.nan), np.full(10, 0.5), 0.3)
    tp = text_probabilities(tr, [(0.05, "turn on the"), (0.2, "turn on the light.")], _Scorer())
    # window i is judged at its start (t - 32 ms): nothing before 0.05 s, then the first text
    expect = [math.nan if s < 0.05 else 0.1 if s < 0.2 else 0.9 for s in t - W]
    np.testing.assert_allclose(tp, expect)
    assert np.all(np.isnan(text_probabilities(tr, [], _Scorer())))


@pytest.mark.unit
def test_choose_takes_the_fastest_policy_within_the_caps_on_every_family():
    def agg(n, cuts, cuts_c, lat):
        return {"n": n, "cuts": cuts, "cuts_complete": cuts_c, "n_complete": n // 2, "latency_sum": lat * (n - cuts)}

    per_family = {  # three policies on two families
        "a": [agg(100, 1, 0, 0.5), agg(100, 2, 0, 0.3), agg(100, 1, 0, 0.2)],
        "b": [agg(100, 1, 0, 0.5), agg(100, 2, 1, 0.3), agg(100, 9, 0, 0.2)],
    }
    assert choose(per_family, ["a", "b"], cap=0.03, cap_complete=0.01) == 0  # 2: b over the cap
    assert choose(per_family, ["a", "b"], cap=0.03, cap_complete=0.02) == 1  # 1: complete cut allowed
    assert choose(per_family, ["a"], cap=0.03, cap_complete=0.0) == 2
    assert choose(per_family, ["b"], cap=0.0, cap_complete=0.0) is None
    r = rates(per_family["b"][1])
    assert r["false_cutoff_rate"] == 0.02 and r["false_cutoff_complete"] == 0.02
    assert r["latency_mean_s"] == pytest.approx(0.3)


@pytest.mark.unit
def test_score_counts_complete_and_paused_cutoffs_apart():
    clips = [Clip("a", np.zeros(10, np.float32), 1.0, "complete", "f1"),
             Clip("b", np.zeros(10, np.float32), 1.0, "paused", "f1"),
             Clip("c", np.zeros(10, np.float32), 1.0, "paused", "f2"),
             Clip("d", np.zeros(10, np.float32), 1.0, "complete", "f2")]
    s = score([0.5, 1.2, 0.7, 1.1], clips, by_family=True)
    assert s["false_cutoff_complete"] == 0.5 and s["false_cutoff_paused"] == 0.5
    assert s["families"]["f1"]["false_cutoff_rate"] == 0.5 and s["families"]["f2"]["false_cutoff_paused"] == 1.0


def _committed_clips():
    return sorted(CLIPS.glob("*.json"))


@pytest.fixture(scope="module")
def detector():
    return EndOfTurnDetector.load()


# The shipped policy's cut-offs among these clips (their STT timelines replayed in real time,
# benchmarks/turn_stt.py): espeak's "When you get a moment" sounds final (prosodic P 0.97), the
# VAD hears the soft "please" after the 0.5 s pause only 0.23 s late, and the bar, falling from
# 0.9, meets P at 0.58 s of silence, one window before the first words come (2.12 s). It is
# one of espeak's two cuts in 96 clips (2.1%). Kept so the miss stays visible; strict: a fix
# makes it fail until it is removed from this set.
KNOWN_CUTS = {"espeak-espeak-en-029-185-s02-paused"}


@pytest.mark.integration
@pytest.mark.parametrize("meta_path", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="known cut-off"))
                                       if p.stem in KNOWN_CUTS else p for p in _committed_clips()],
                         ids=lambda p: p.stem)
def test_detector_waits_out_the_pause_and_ends_the_turn_for_each_family(detector, meta_path):
    """One complete and one paused clip per family (a mid-sentence pause, then the rest of the
    sentence) with the real STT's interim texts at their recorded arrival times, as `parley bench
    turn --stt`: no decision before the turn's end, one within max_wait after it."""
    meta = json.loads(meta_path.read_text())
    audio, sr = read_wav(meta_path.with_suffix(".wav"))
    assert sr == 16000 and meta["kind"] in ("complete", "paused")
    audio = np.concatenate([audio, np.zeros(int(2.5 * sr), dtype=np.float32)])  # committed: turn end + 1.5 s
    clip = Clip(meta_path.stem, audio, meta["turn_end"], meta["kind"], meta["family"], meta["text"])
    (when,), _ = run_ours([clip], detector, [[tuple(x) for x in meta["stt_timeline"]]])
    assert when is not None, "no decision after the turn"
    assert when >= clip.turn_end, f"cut off at {when:.2f} s in the pause, turn ends {clip.turn_end:.2f} s"
    assert when <= clip.turn_end + detector.policy.max_wait_s + 0.1


@pytest.mark.unit
def test_one_committed_clip_per_family():
    metas = [json.loads(p.read_text()) for p in _committed_clips()]
    for kind in ("complete", "paused"):
        assert {m["family"] for m in metas if m["kind"] == kind} == set(FAMILY_NAMES)


@pytest.mark.integration
def test_transcripts_reach_the_detector_at_their_arrival_time(detector):
    policy = EndpointingPolicy(min_wait_s=0.1, max_wait_s=1.2, high=0.7, low=0.3, text_weight=3.0)
    det = detector.with_policy(policy)
    meta_path = _committed_clips()[0]
    meta = json.loads(meta_path.read_text())
    audio, _ = read_wav(meta_path.with_suffix(".wav"))
    clip = Clip("x", audio, meta["turn_end"], "paused")
    end = clip.turn_end
    (late,), _ = run_ours([clip], det, [[(0.1, "could you please book a table for the")]])
    (early,), _ = run_ours([clip], det, [[(0.1, "could you please book a table for the"), (end + 0.05, meta["text"])]])
    assert late is not None and early is not None and early < late


@pytest.mark.integration
@pytest.mark.parametrize("voice", [FAMILIES["flite"][4], FAMILIES["festival"][0]], ids=lambda v: v.label)
def test_debian_voices_speak_at_16_khz(voice):
    import shutil

    from turn_detection.training.data import synthesize

    if shutil.which("flite" if voice.engine == "flite" else "text2wave") is None:
        pytest.skip(f"Debian {voice.engine} not installed (only regenerating family data needs it)")
    audio = synthesize(voice, "Close the garage door.")
    assert audio.dtype == np.float32 and 0.6 < len(audio) / 16000 < 3.0
    assert np.sqrt(np.mean(audio**2)) > 0.01


@pytest.mark.integration
@pytest.mark.slow
def test_stt_timeline_brings_the_words_after_they_are_spoken(tmp_path):
    from benchmarks.turn_stt import stt_timelines

    meta_path = next(p for p in _committed_clips() if p.stem.startswith("piper"))
    meta = json.loads(meta_path.read_text())
    audio, _ = read_wav(meta_path.with_suffix(".wav"))
    clip = Clip(meta_path.stem, audio, meta["turn_end"], meta["kind"], meta["family"], meta["text"])
    cache = tmp_path / "stt.json"
    (timeline,) = stt_timelines([clip], cache)
    assert cache.is_file() and stt_timelines([clip], cache) == [timeline]  # read back, not redone
    times = [t for t, _ in timeline]
    assert times == sorted(times) and times[0] > meta["speech"][0][0]
    last = normalize(timeline[-1][1])
    assert timeline[-1][0] > clip.turn_end  # the last words come after they were spoken
    assert len(set(last) & set(normalize(meta["text"]))) >= len(normalize(meta["text"])) // 2


class _SlowDecoder:
    """Stands in for stt.WhisperDecoder: every decode takes `delay_s` and hears one word per
    20 ms of the audio it gets (w0 w1 ...): the more words, the newer the audio it had."""

    def __init__(self, delay_s: float) -> None:
        from stt.config import TranscriberConfig

        self.config, self.delay_s = TranscriberConfig(), delay_s

    def decode(self, audio, prompt="", beam_size=None, *, stages=None, cancelled=None, on_text=None,
               on_draft=None):
        import time

        from stt.events import Word

        time.sleep(self.delay_s)
        n = len(audio) // 320
        return [Word(f"w{i}", 0.02 * i, 0.02 * i + 0.01) for i in range(n)], self.delay_s


@pytest.mark.integration
def test_stt_timeline_words_come_a_decode_after_the_speech_ends():
    # The timeline is what a session would hear, in real time: the decode that hears the
    # turn's last words starts once the speech stops and its words come a decode later. The
    # fast replay the caches were first built with (every due decode done before the next
    # frame) gave them out when the pause was confirmed, ~0.1 s after the end, whatever the
    # decode cost, and an interim the pause decode abandons in real time still came out.
    from benchmarks.turn_stt import stt_timeline

    meta_path = next(p for p in _committed_clips() if p.stem.startswith("piper"))
    meta = json.loads(meta_path.read_text())
    audio, _ = read_wav(meta_path.with_suffix(".wav"))
    delay = 0.5
    timeline = stt_timeline(_SlowDecoder(delay), audio, meta["turn_end"])
    counts = [len(x.split()) for _, x in timeline]
    i = counts.index(max(counts))
    assert timeline[i][0] >= meta["turn_end"] + delay - 0.05
    assert all(c == counts[i] for c in counts[i:])  # nothing older after the whole turn


@pytest.fixture(scope="module")
def llm_detector(detector):
    """The session's detector with our engine judging the words (pipeline.turn_text): the
    default of a voice session with the embedded LLM, its probe and its policy."""
    from llm_engine import LLMEngine
    from pipeline.config import DEFAULT_INSTRUCTIONS, SessionConfig
    from pipeline.session import _witness_probe
    from pipeline.turn_text import EngineCompletenessScorer

    engine = LLMEngine.for_voice()
    system = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}]
    probe, policy = _witness_probe(SessionConfig())
    assert probe is not None  # the embedded model has one
    # a generous timeout: the test is about the decisions, not about a loaded machine's speed
    scorer = EngineCompletenessScorer(engine, detector.text_scorer, context=lambda: system, timeout_s=10.0,
                                      probe=probe)
    return detector.with_text_scorer(scorer, EndpointingPolicy.load(policy))


# With the LLM judging the words, flite's cut above is gone. Festival's was on the edge with
# the raw P(end) and its policy ("When you get a moment" back inside the 1.24 s pause of its
# slow voice, P_audio 0.98; the CPU's rounding decided). With the probe (pipeline.turn_probe)
# that text scores 0.11, and its policy (audio 0.25, text 0.5, bias -1) gives a combined P of
# 0.25 in the pause (at most 0.42 even at P_audio 0.999) against a bar of 0.54 when it ends.
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("meta_path", _committed_clips(), ids=lambda p: p.stem)
def test_the_llm_witness_waits_out_the_pause_and_ends_the_turn_for_each_family(llm_detector, meta_path):
    """The same clips and recorded STT timelines with the voice LLM as the text witness."""
    meta = json.loads(meta_path.read_text())
    audio, _ = read_wav(meta_path.with_suffix(".wav"))
    audio = np.concatenate([audio, np.zeros(int(2.5 * 16000), dtype=np.float32)])
    clip = Clip(meta_path.stem, audio, meta["turn_end"], meta["kind"], meta["family"], meta["text"])
    (when,), _ = run_ours([clip], llm_detector, [[tuple(x) for x in meta["stt_timeline"]]])
    assert when is not None, "no decision after the turn"
    assert when >= clip.turn_end, f"cut off at {when:.2f} s in the pause, turn ends {clip.turn_end:.2f} s"
    assert when <= clip.turn_end + llm_detector.policy.max_wait_s + 0.1
    assert llm_detector.text_scorer.fallbacks == 0  # every text P came from the LLM
