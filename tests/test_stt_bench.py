"""The STT benchmark's own measures (no model, no synthesizer): where speech ends, what counts
as a lost tail word, and the per-delay summary."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.stt import speech_end_s, summarize, tail_lost, wer

pytestmark = pytest.mark.unit


def test_speech_end_ignores_the_synthesizers_near_silence():
    t = np.arange(16_000) / 16_000
    tone = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    hiss = np.full(8000, 0.002, np.float32)  # 0.4% of the peak: below the 2% floor
    assert speech_end_s(np.concatenate([tone, hiss])) == pytest.approx(1.0, abs=0.011)
    assert speech_end_s(np.zeros(1600, np.float32)) == 0.0


def test_tail_lost_is_the_last_word_missing_from_the_end():
    assert not tail_lost("Do you have any tips for a beginner?", "do you have any tips for beginner")
    assert tail_lost("Do you have any tips for a beginner?", "Do you have any tips")
    assert not tail_lost("No, the green one.", "no the green one. one")  # among the last two
    assert not tail_lost("", "anything")


def test_numbers_are_no_error_in_either_spelling():
    assert not tail_lost("My flight leaves tomorrow at seven.", "My flight leaves tomorrow at 7.")
    assert wer(["It costs $5.20 on the fourteenth."], ["it costs five dollars and twenty cents on the 14th"]) == 0.0
    assert wer(["Set a timer for twenty five minutes."], ["Set the timer for 25 minutes."]) == pytest.approx(100 / 7)  # "a" for "the" only


def test_summary_counts_finals_without_their_own_decode():
    rows = [{"final_latency_s": lat, "final_decode_s": dec, "no_new_decode": dec == 0.0, "interim_gap_s": 0.5,
             "interim_latency_s": 0.01, "preflight": True, "decode_s": 0.2, "duration_s": 2.0, "cpu_s": 1.0,
             "wall_s": 2.0, "text": "turn the lights off", "final": final, "offline": offline}
            for lat, dec, final, offline in [(0.01, 0.0, "turn the lights off", "turn the lights of"),
                                             (0.2, 0.15, "turn the lights", "turn the lights off"),
                                             (0.05, 0.0, "turn the lights of", "turn the lights of")]]
    s = summarize(rows, 0.25)
    assert s["final_no_new_decode_share"] == pytest.approx(2 / 3)
    assert s["final_latency_ms_p50"] == pytest.approx(50.0)
    # the third lost its tail as offline did (the model's error); the second lost it alone
    assert s["tail_lost_stream"] == 2 and s["tail_lost_stream_only"] == 1
    assert s["wer_stream"] == pytest.approx(200 / 12)
    assert s["stream_cpu_cores"] == pytest.approx(0.5)


def test_turn_timeline_puts_the_decodes_on_the_clock_of_the_last_word():
    from benchmarks.stt_timeline import summarize_timelines, turn_timeline
    from stt.utterance import DecodeJob

    def job(kind, planned, started, ended, abandoned=False, tentative=False):
        return DecodeJob(kind, 0, 0, 0, np.zeros(0, np.float32), "", 5, abandoned=abandoned, tentative=tentative,
                         speech_end_s=12.015, planned_wall=planned, started_wall=started, ended_wall=ended,
                         stages={"encode_s": 0.1, "text_s": 0.12})

    t0, speech_end = 100.0, 2.0  # wall at stream time 0; the last word ends at 2.0 s
    interim = job("interim", 101.7, 101.7, 102.1, abandoned=True)
    pause = job("pause", 102.04, 102.041, 102.27, tentative=True)
    tl = turn_timeline([interim, pause], t0, speech_end, 0.25, 0.02, stream_offset_s=10.0)
    assert tl["final_kind"] == "pause" and tl["decodes"] == 2 and tl["abandoned"] == 1 and tl["tentative"] == 1
    assert tl["gate_speech_end_ms"] == pytest.approx(15.0)
    assert tl["planned_ms"] == pytest.approx(40.0) and tl["queued_ms"] == pytest.approx(1.0)
    assert tl["decode_ended_ms"] == pytest.approx(270.0) and tl["final_ms"] == pytest.approx(270.0)
    assert tl["beside_other_decode_ms"] == pytest.approx(59.0)  # the interim ran on until 102.1
    s = summarize_timelines([tl, {**tl, "planned_ms": 60.0}])
    assert s["planned_ms_median"] == pytest.approx(50.0) and s["final_from_pause_share"] == 1.0
