"""The voice benchmark's timeline and per-turn scoring, without a session or real time."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.voice_data import VoiceClip
from benchmarks.voice_report import percentiles, summarize
from benchmarks.voice_score import covers_end, first_audible, onset_after, score_turn
from benchmarks.voice_timeline import Timeline

RATE = 16_000


def _frame(level: float = 0.5, n: int = 320) -> np.ndarray:
    return np.full(n, round(level * 32767), dtype=np.int16)


@pytest.mark.unit
def test_agent_frames_land_at_arrival_or_after_the_previous_one():
    tl = Timeline(t0=100.0)
    assert tl.add_agent(_frame(), RATE, now=101.0) == RATE  # arrives 1 s into the clip
    # a burst: three frames handed over at once play one after the other
    starts = [tl.add_agent(_frame(), RATE, now=101.001) for _ in range(3)]
    assert starts == [RATE + 320, RATE + 640, RATE + 960]
    # a frame 0.5 s later lands at its arrival, after a gap
    assert tl.add_agent(_frame(), RATE, now=101.5) == 24_000
    agent = tl.agent_track()
    assert first_audible(agent, 0.01) == RATE
    assert onset_after(agent, 0.01, RATE + 1) == 24_000


@pytest.mark.unit
def test_interrupt_drops_what_was_buffered_beyond_now():
    tl = Timeline(t0=0.0)
    for _ in range(50):  # 1 s of agent audio handed over at once at t = 1 s
        tl.add_agent(_frame(), RATE, now=1.0)
    tl.interrupt(now=1.2)
    agent = tl.agent_track()
    assert np.abs(agent[RATE : round(1.2 * RATE)]).min() > 0.4
    assert not np.any(agent[round(1.2 * RATE) :])
    assert not tl.agent_playing(1.2)
    assert tl.add_agent(_frame(), RATE, now=1.5) == 24_000


@pytest.mark.unit
def test_agent_audio_at_another_rate_is_resampled_onto_the_timeline():
    tl = Timeline(t0=0.0)
    for k in range(10):  # 200 ms of Piper-rate frames, arriving paced from t = 0.5 s
        tl.add_agent(_frame(0.5, 441), 22_050, now=0.5 + 0.02 * k)
    tl.add_user(np.zeros(RATE, dtype=np.float32))
    stereo = tl.stereo()
    assert stereo.shape == (RATE, 2) and not stereo[:, 0].any()
    first = first_audible(stereo[:, 1], 0.01)
    assert abs(first - 8000) <= 16  # within 1 ms (the resampler's delay is ~0.5 ms)
    assert abs(np.count_nonzero(np.abs(stereo[:, 1]) > 0.25) - 3200) <= 32


@pytest.mark.unit
@pytest.mark.parametrize(("transcript", "covered"), [
    ("set a timer for ten minutes", True),
    ("Set a timer for 10 minutes.", True),  # digits and punctuation, as Whisper writes them
    ("set a timer for ten minuets", True),  # a misspelt last word
    ("set a timer for ten minutes please", True),  # a trailing word
    ("set a timer for", False),  # stopped at the mid-sentence pause
    ("set a timer for ten", False),  # lacks the last word
    ("", False),
])
def test_transcript_covers_the_turns_last_words(transcript, covered):
    assert covers_end("Set a timer for ten minutes.", transcript) is covered


def _clip(turn_end: float = 1.0) -> VoiceClip:
    return VoiceClip("c", np.zeros(2 * RATE, np.float32), "what is the weather in Paris", "complete", turn_end, ())


@pytest.mark.unit
def test_score_turn_reads_latency_and_replies_from_audio_and_events():
    agent = np.zeros(3 * RATE, np.float32)
    agent[round(1.45 * RATE) : 2 * RATE] = 0.2
    agent[round(1.45 * RATE) - 5 : round(1.45 * RATE)] = 0.001  # below -40 dBFS: not audible
    events = [(0.9, {"type": "transcript", "final": False, "text": "what is the", "turn": 0}),
              (1.2, {"type": "transcript", "final": True, "text": "what is the weather in paris", "turn": 0}),
              (1.3, {"type": "reply", "text": "It is", "final": False, "turn": 0}),
              (1.5, {"type": "reply", "text": "It is sunny.", "final": True, "turn": 0}),
              (1.5, {"type": "budget", "turn": 0, "perceived_ms": 430.0, "budget_ms": 600.0,
                     "stages": [{"name": "endpointing", "ms": 250.0, "allotment_ms": 250.0, "overrun": False}],
                     "overruns": [], "marks": {}})]
    row = score_turn(_clip(), agent, events, 0.01)
    assert row["perceived_ms"] == pytest.approx(450.0) and not row["false_cutoff"]
    assert row["reply"] == "It is sunny." and row["transcript"] == "what is the weather in paris"
    assert not row["half_sentence"] and row["budget"]["perceived_ms"] == 430.0
    # what the session heard when, from the turn's end: the words the decision had
    assert row["heard"] == [{"ms": -100.0, "kind": "interim", "text": "what is the"},
                            {"ms": 200.0, "kind": "final", "text": "what is the weather in paris"}]
    row = score_turn(_clip(), np.zeros(3 * RATE, np.float32), events, 0.01)
    assert row["no_reply"] and row["perceived_ms"] is None and not row["false_cutoff"]


@pytest.mark.unit
def test_the_longest_silence_inside_the_reply_is_read_from_its_audio():
    agent = np.zeros(6 * RATE, np.float32)
    agent[round(0.9 * RATE) : round(1.0 * RATE)] = 0.2  # a false cutoff's words, mid-pause
    agent[round(2.0 * RATE) : round(2.5 * RATE)] = 0.2  # the reply: 0.5 s, a 0.7 s stall, 0.4 s
    agent[round(3.2 * RATE) : round(3.6 * RATE)] = 0.2
    agent[round(3.6 * RATE) : round(3.9 * RATE)] = 0.005  # below -40 dBFS: silence, then 0.3 s
    agent[round(3.9 * RATE) : round(4.1 * RATE)] = 0.2
    row = score_turn(_clip(turn_end=1.5), agent, [], 0.01)
    assert row["false_cutoff"] and row["longest_pause_ms"] == pytest.approx(700.0, abs=0.1)
    row = score_turn(_clip(turn_end=0.8), agent, [], 0.01)  # a reply from 0.9 s on: 1.0 -> 2.0
    assert not row["false_cutoff"] and row["longest_pause_ms"] == pytest.approx(1000.0, abs=0.1)
    agent[round(2.5 * RATE) : round(3.2 * RATE)] = 0.2
    assert score_turn(_clip(turn_end=1.5), agent, [], 0.01)["longest_pause_ms"] == pytest.approx(300.0, abs=0.1)
    one = np.zeros(2 * RATE, np.float32)
    one[RATE] = 0.2
    assert score_turn(_clip(), one, [], 0.01)["longest_pause_ms"] is None


@pytest.mark.unit
def test_summary_counts_and_percentiles():
    rows = [{"perceived_ms": v, "false_cutoff": False, "half_sentence": False, "no_reply": False, "budget": None}
            for v in (400.0, 500.0, 850.0)]
    rows.append({"perceived_ms": None, "false_cutoff": True, "half_sentence": True, "no_reply": False,
                 "budget": None})
    s = summarize(rows)
    assert s["perceived_ms"]["p50"] == 500.0 and s["perceived_ms"]["n"] == 3
    assert (s["false_cutoffs"], s["false_cutoff_rate"], s["half_sentence_replies"]) == (1, 0.25, 1)
    assert s["histogram_ms"]["counts"] == [0, 2, 1, 0, 0, 0]
    assert s["longest_pause_ms"] is None and s["stalled_replies"] == 0
    for r, pause in zip(rows, (300.0, 650.0, None, 900.0), strict=True):
        r["longest_pause_ms"] = pause
    s = summarize(rows)
    assert s["stalled_replies"] == 2 and s["longest_pause_ms"]["max"] == 900.0 and s["longest_pause_ms"]["n"] == 3
    assert percentiles([]) is None


@pytest.mark.unit
@pytest.mark.parametrize("name", ["sample", "second", "answers", "long"])
def test_the_bundled_conversations_are_valid_and_held_out(name):
    from benchmarks.make_voice_sample import CONVERSATIONS, PAUSE_S
    from benchmarks.voice_data import load_conversation
    from turn_detection.training import sentences
    from turn_detection.training.data import speech_intervals

    lines, out = CONVERSATIONS[name]
    clips, skipped = load_conversation(out)
    assert not skipped and [c.name for c in clips] == [line.name for line in lines]
    assert 4 <= len(clips) <= 6 and len({line.engine for line in lines}) >= 2
    held = set(sentences.TRAIN) | set(sentences.VALIDATION) | set(sentences.TEST)
    held |= {*sentences.ANSWERS_TRAIN, *sentences.ANSWERS_VALIDATION, *sentences.ANSWERS_TEST}
    for clip in clips:
        assert clip.text not in held and covers_end(clip.text, clip.text)
        # the labels agree with the audio: the last speech run ends at turn_end
        assert abs(speech_intervals(clip.audio, gap_s=0.3)[-1][1] - clip.turn_end) <= 0.01
    if name == "answers":  # short turns, none paused
        assert all(c.kind == "complete" for c in clips) and sum(len(c.text.split()) <= 4 for c in clips) >= 4
        return
    if name == "long":  # two turns of 8 s and more, none paused
        assert all(c.kind == "complete" for c in clips) and sum(c.turn_end >= 8.0 for c in clips) >= 2
        return
    (paused,) = [c for c in clips if c.kind == "paused"]
    ((start, end),) = paused.pauses
    assert end - start == pytest.approx(PAUSE_S, abs=0.01) and start > 0.5 and end < paused.turn_end
    assert not np.any(np.abs(paused.audio[round(start * RATE) + 16 : round(end * RATE) - 16]) > 1e-3)


@pytest.mark.unit
def test_the_second_conversation_shares_no_sentence_and_no_voice_setting_with_the_first():
    from benchmarks.make_voice_sample import CONVERSATION, SECOND

    assert not {line.text for line in SECOND} & {line.text for line in CONVERSATION}
    assert not {(line.engine, line.voice, line.rate) for line in SECOND} & {
        (line.engine, line.voice, line.rate) for line in CONVERSATION}


@pytest.mark.unit
def test_the_transcript_a_reply_answered_when_turn_numbers_do_not_line_up():
    agent = np.zeros(3 * RATE, np.float32)
    reply = (1.5, {"type": "reply", "text": "Sunny.", "final": True, "turn": 7})
    final = (1.2, {"type": "transcript", "final": True, "text": "what is the weather in", "turn": 3})
    # no final under turn 7: the last final heard before the reply (it lacks "Paris": half)
    row = score_turn(_clip(), agent, [final, reply], 0.01)
    assert row["transcript"] == "what is the weather in" and row["half_sentence"]
    # the budget's user_text for turn 7 comes first
    budget = (1.5, {"type": "budget", "turn": 7, "user_text": "what is the weather in paris", "stages": []})
    row = score_turn(_clip(), agent, [final, reply, budget], 0.01)
    assert row["transcript"] == "what is the weather in paris" and not row["half_sentence"]


@pytest.mark.unit
def test_stage_times_outside_the_turn_are_counted_apart():
    def row(ms):
        stage = {"name": "first_token", "ms": ms, "allotment_ms": 60.0, "overrun": ms > 60}
        return {"perceived_ms": 500.0, "false_cutoff": False, "half_sentence": False, "no_reply": False,
                "budget": {"stages": [stage], "overruns": []}, "timeline_s": 30.0, "turn_end_s": 4.0}
    st = summarize([row(50.0), row(90.0), row(-19466.0), row(19413.0)])["stages"]["first_token"]
    assert (st["n"], st["invalid"], st["overruns"], st["p50"]) == (2, 2, 1, 70.0)
