"""Scoring one replayed turn from its audio timeline and the session's events.

Perceived latency is read from the audio, not from the session's own marks: labels' turn_end
-> the first agent output sample whose magnitude reaches the silence threshold (-40 dBFS by
default: Piper's and espeak's leading samples are far below it, their first phoneme far
above). A reply heard before turn_end is a false cutoff; such a turn has no perceived latency
(as in `parley bench turn`), and `reanswer_ms` says when the agent spoke again after the turn.

A reply answers half a sentence when the final user transcript it answered (the session's
"transcript" events of the reply's turn) does not cover the clip's last words: both texts are
normalized for speech (digits -> words, as Whisper writes "10" for "ten") and compared word by
word with a tolerance for spelling (difflib ratio >= 0.75), so "tomorow" still covers
"tomorrow" while a transcript that stopped at the mid-sentence pause does not."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

import numpy as np

from benchmarks.voice_data import VoiceClip
from parley.audio import ENGINE_RATE
from tts.normalize import normalize_text

ONSET_HOLD_S = 0.1  # an onset needs this much agent silence before it
END_WINDOW = 3  # the text's last word must be among the transcript's last 3 words
WORD_MATCH = 0.75
MAX_ERRORS = 5  # a failing stage can send thousands of error events in one turn (seen: 3,400)


def db_to_amplitude(db: float) -> float:
    return float(10.0 ** (db / 20.0))


def first_audible(track: np.ndarray, threshold: float, start: int = 0) -> int | None:
    hits = np.flatnonzero(np.abs(track[start:]) >= threshold)
    return int(start + hits[0]) if len(hits) else None


def onset_after(track: np.ndarray, threshold: float, start: int) -> int | None:
    """First audible sample at or after `start` preceded by ONSET_HOLD_S of agent silence."""
    audible = np.abs(track) >= threshold
    hold = round(ONSET_HOLD_S * ENGINE_RATE)
    for i in np.flatnonzero(audible[start:]) + start:
        if not audible[max(0, i - hold) : i].any():
            return int(i)
    return None


def longest_pause(track: np.ndarray, threshold: float, start: int) -> int | None:
    """The longest run of samples below `threshold` between two audible samples at or after
    `start` (the silence inside a reply, where a slow chunk stalls it); None with < 2 audible."""
    audible = np.flatnonzero(np.abs(track[start:]) >= threshold)
    return int(np.diff(audible).max()) - 1 if len(audible) >= 2 else None


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", normalize_text(text).lower())


def _same_word(a: str, b: str) -> bool:
    return a == b or SequenceMatcher(None, a, b).ratio() >= WORD_MATCH


def covers_end(text: str, transcript: str) -> bool:
    """Does `transcript` reach the end of `text`? The text's last word must (nearly) match one
    of the transcript's last END_WINDOW words: a word or two of trailing noise or a misheard
    neighbour is tolerated, a transcript that stopped before the last word is not."""
    want = words(text)
    if not want:
        return True
    return any(_same_word(want[-1], w) for w in words(transcript)[-END_WINDOW:])


def _replies(events: list[tuple[float, dict]]) -> list[dict]:
    """Per session turn that produced reply text: the final transcript(s) it answered (those
    with the reply's turn number, else its budget's user_text, else the last final before the
    reply's first text)."""
    finals: dict[int, list[str]] = {}
    timed: list[tuple[float, str]] = []  # every final, for a session whose turn numbers differ
    interim: dict[int, str] = {}
    texts: dict[int, tuple[float, str]] = {}
    budget_text: dict[int, str] = {}  # the session's budget may carry the turn's user text too
    for t, ev in events:
        kind, turn = ev.get("type"), ev.get("turn")
        if kind == "budget" and str(ev.get("user_text") or "").strip():
            budget_text[turn] = str(ev["user_text"]).strip()
        if kind == "transcript" and ev.get("final"):
            finals.setdefault(turn, []).append(str(ev.get("text", "")).strip())
            timed.append((t, str(ev.get("text", "")).strip()))
        elif kind == "transcript":
            interim[turn] = str(ev.get("text", "")).strip()
        elif kind == "reply" and str(ev.get("text", "")).strip():
            first_t = texts[turn][0] if turn in texts else t
            texts[turn] = (first_t, str(ev["text"]).strip())  # the text so far: keep the last
    out = []
    for turn, (t, text) in sorted(texts.items(), key=lambda kv: kv[1][0]):
        said = " ".join(s for s in finals.get(turn, []) if s) or budget_text.get(turn, "")
        if not said:  # no final under the reply's turn number: the last final heard before it
            said = next((s for ft, s in reversed(timed) if ft <= t and s), interim.get(turn, ""))
        out.append({"turn": turn, "t_s": round(t, 3), "transcript": said, "text": text})
    return out


def _budget(events: list[tuple[float, dict]], turn) -> dict | None:
    budgets = [ev for _, ev in events if ev.get("type") == "budget"]
    mine = [b for b in budgets if b.get("turn") == turn] or budgets
    if not mine:
        return None
    b = mine[-1]
    return {"turn": b.get("turn"), "perceived_ms": b.get("perceived_ms"), "budget_ms": b.get("budget_ms"),
            "stages": list(b.get("stages", [])), "overruns": list(b.get("overruns", [])),
            "marks": dict(b.get("marks") or {})}


def _session_speech_end(events: list[tuple[float, dict]], t0: float | None) -> float | None:
    """Timeline seconds of the session's last "speech ended" (vad event, monotonic `t`) heard
    before its budget event: where the budget's marks are anchored in the waterfall."""
    if t0 is None:
        return None
    until = max((t for t, ev in events if ev.get("type") == "budget"), default=float("inf"))
    ends = [float(ev["t"]) - t0 for t, ev in events
            if ev.get("type") == "vad" and ev.get("speaking") is False and isinstance(ev.get("t"), int | float)
            and t <= until]
    return round(ends[-1], 4) if ends else None


def _ms(samples: int) -> float:
    return round(1000.0 * samples / ENGINE_RATE, 1)


def _heard(events: list[tuple[float, dict]], turn_end_s: float) -> list[dict]:
    """What the session heard, in order, at ms from the labels' turn end: its VAD's speech
    starts and ends (when it emitted them) and every transcript, interim or final, so a turn's
    endpointing can be read word by word (which words it had when, and how late the last ones
    came)."""
    out = []
    for t, ev in events:
        kind = ev.get("type")
        if kind == "transcript":
            out.append({"ms": round(1000.0 * (t - turn_end_s), 1), "kind": "final" if ev.get("final") else "interim",
                        "text": str(ev.get("text", ""))})
        elif kind == "vad":
            out.append({"ms": round(1000.0 * (t - turn_end_s), 1),
                        "kind": "speech_start" if ev.get("speaking") else "speech_end"})
    return out


def score_turn(clip: VoiceClip, agent: np.ndarray, events: list[tuple[float, dict]],
               threshold: float, t0: float | None = None) -> dict:
    """One turn's row of report.json (agent: the timeline's right channel; t0: the monotonic
    time of the timeline's start, to place the session's own clock readings on it)."""
    end = round(clip.turn_end * ENGINE_RATE)
    first = first_audible(agent, threshold)
    cut = first is not None and first < end
    after = onset_after(agent, threshold, end)
    replies = []
    for r in _replies(events):
        r["covers_end"] = covers_end(clip.text, r["transcript"])
        replies.append(r)
    answered = replies[-1] if replies else None
    errors = [str(ev.get("message", "")) for _, ev in events if ev.get("type") == "error"]
    vad_end = _session_speech_end(events, t0)
    reply_start = after if cut else first
    pause = None if reply_start is None else longest_pause(agent, threshold, reply_start)
    return {
        "name": clip.name, "kind": clip.kind, "text": clip.text, "turn_end_s": clip.turn_end,
        "first_agent_s": None if first is None else round(first / ENGINE_RATE, 4),
        "perceived_ms": None if cut or first is None else _ms(first - end),
        "false_cutoff": cut,
        "reanswer_ms": _ms(after - end) if cut and after is not None else None,
        "no_reply": first is None,
        "longest_pause_ms": None if pause is None else _ms(pause),
        "half_sentence": any(not r["covers_end"] for r in replies),
        "transcript": answered["transcript"] if answered else "",
        "reply": answered["text"] if answered else "",
        "replies": replies,
        "interrupts": sum(1 for _, ev in events if ev.get("type") == "interrupt"),
        "error_count": len(errors),
        "errors": list(dict.fromkeys(errors))[:MAX_ERRORS],  # the first distinct messages
        "budget": _budget(events, answered["turn"] if answered else None),
        # where the session's VAD put the end of speech, vs the labels (its endpointing head start)
        "session_speech_end_s": vad_end,
        "vad_lag_ms": None if vad_end is None else round(1000 * (vad_end - clip.turn_end), 1),
        "heard": _heard(events, clip.turn_end),
    }
