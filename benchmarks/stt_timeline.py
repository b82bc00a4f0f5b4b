"""Where the time between the last word and the final transcript goes, per turn.

The transcriber reports every finished decode (`StreamingTranscriber(on_decode=...)`) with
its wall times; `turn_timeline` puts them on the replay's clock, in ms after the end of the
speech (the clip's last loud 10 ms frame): when the speech gate's last speech window ended
(Silero's lag), when the decode the final came from was planned (the pause decision), how
long it queued for a decode thread, its encoder and text (generate + word alignment) time,
when its words were ready before their alignment (its preflight went out then),
how much of it ran beside another decode (an interim on the other replica), when the flush
came and when the final was ready."""

from __future__ import annotations

import statistics
import threading

import numpy as np


class DecodeLog:
    """The `on_decode` hook: collects finished decodes (from decode threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list = []

    def __call__(self, job) -> None:
        with self._lock:
            self._jobs.append(job)

    def take(self) -> list:
        with self._lock:
            out, self._jobs = self._jobs, []
        return out


def _overlap(a, b) -> float:
    return max(0.0, min(a.ended_wall, b.ended_wall) - max(a.started_wall, b.started_wall))


def turn_timeline(jobs: list, t0_wall: float, speech_end_s: float, flush_delay_s: float,
                  final_latency_s: float, stream_offset_s: float = 0.0) -> dict:
    """`jobs`: one turn's finished decodes; `t0_wall`: perf_counter when the turn's first
    sample was pushed, at the transcriber's stream time `stream_offset_s`."""
    def ms(wall: float) -> float:
        return 1000 * (wall - t0_wall - speech_end_s)

    kept = [j for j in jobs if j.kind != "interim" and not j.abandoned]
    out = {"decodes": len(jobs), "abandoned": sum(j.abandoned for j in jobs),
           "tentative": sum(j.tentative for j in jobs),
           "tentative_to_interim": sum(j.tentative and j.kind == "interim" for j in jobs),
           "flush_ms": 1000 * flush_delay_s, "final_ms": 1000 * (flush_delay_s + final_latency_s)}
    if not kept:
        return out
    last = max(kept, key=lambda j: j.planned_wall)  # the decode the final came from
    beside = [j for j in jobs if j is not last]
    out.update({
        "final_kind": last.kind,
        "gate_speech_end_ms": 1000 * (last.speech_end_s - stream_offset_s - speech_end_s),
        "planned_ms": ms(last.planned_wall),
        "queued_ms": 1000 * (last.started_wall - last.planned_wall),
        "encode_ms": 1000 * last.stages.get("encode_s", 0.0),
        "text_ms": 1000 * last.stages.get("text_s", 0.0),
        "decode_ended_ms": ms(last.ended_wall),
        **({"text_ready_ms": ms(last.text_wall)} if last.text_wall else {}),
        "beside_other_decode_ms": 1000 * sum(_overlap(last, j) for j in beside),
    })
    return out


TIMELINE_KEYS = ("gate_speech_end_ms", "planned_ms", "queued_ms", "encode_ms", "text_ms", "text_ready_ms",
                 "decode_ended_ms",
                 "beside_other_decode_ms", "flush_ms", "final_ms", "decodes", "abandoned", "tentative",
                 "tentative_to_interim")


def summarize_timelines(timelines: list[dict]) -> dict:
    """Median (and p90 of the times) of each timeline entry over the turns that have it."""
    out = {}
    for k in TIMELINE_KEYS:
        xs = [t[k] for t in timelines if k in t]
        if xs:
            out[f"{k}_median"] = statistics.median(xs)
            if k.endswith("_ms"):
                out[f"{k}_p90"] = float(np.percentile(xs, 90))
    out["final_from_pause_share"] = sum(t.get("final_kind") == "pause" for t in timelines) / max(1, len(timelines))
    return out


def timeline_table(summary: dict) -> str:
    """One line per step, medians and p90s, in the order they happen."""
    rows = [("speech gate: last speech window ends", "gate_speech_end_ms"),
            ("decode the final came from: planned", "planned_ms"),
            ("  queued for a decode thread", "queued_ms"),
            ("  encoder", "encode_ms"),
            ("  generate + word alignment", "text_ms"),
            ("  words ready, before their alignment", "text_ready_ms"),
            ("  beside another decode", "beside_other_decode_ms"),
            ("  ended", "decode_ended_ms"),
            ("flush", "flush_ms"),
            ("final ready", "final_ms")]
    lines = [f"{'ms after the last word':44s} {'median':>8s} {'p90':>8s}"]
    for label, k in rows:
        if f"{k}_median" in summary:
            lines.append(f"{label:44s} {summary[f'{k}_median']:8.1f} {summary[f'{k}_p90']:8.1f}")
    return "\n".join(lines)
