"""Replay a recorded buffer into a transcriber as 20 ms frames: paced in real time (what a
microphone does), or as fast as decoding allows with every due decode done (tests, --fast)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parley.audio import frames, validate_audio
from stt.decoder import SAMPLE_RATE
from stt.events import TranscriptEvent


@dataclass(frozen=True)
class Replay:
    events: tuple[TranscriptEvent, ...]  # interim/preflight, in order
    final: TranscriptEvent
    wall_s: float  # push of the first frame -> final
    cpu_s: float  # process CPU time over the same span


def replay(transcriber, audio: np.ndarray, sample_rate: int = SAMPLE_RATE, *, realtime: bool = True,
           frame_ms: float = 20.0, flush_at_s: float | None = None,
           on_event: Callable[[TranscriptEvent], None] | None = None) -> Replay:
    """Push `audio` frame by frame, then flush. `flush_at_s`: stream time to flush at (default:
    after the last frame); audio after it is not pushed."""
    x = validate_audio(audio, sample_rate)
    events: list[TranscriptEvent] = []

    def take(batch: list[TranscriptEvent]) -> None:
        for e in batch:
            events.append(e)
            if on_event:
                on_event(e)

    t0, c0 = time.perf_counter(), time.process_time()
    for f in frames(x, SAMPLE_RATE, frame_ms):
        if flush_at_s is not None and f.timestamp_s >= flush_at_s:
            break
        if realtime:
            time.sleep(max(0.0, t0 + f.timestamp_s - time.perf_counter()))
        take(transcriber.push(f.samples))
        if not realtime:
            transcriber.wait_idle()
    if realtime and flush_at_s is not None:
        time.sleep(max(0.0, t0 + flush_at_s - time.perf_counter()))
    transcriber.wait_idle(0) if realtime else transcriber.wait_idle()
    take(transcriber.poll())
    final = transcriber.flush()
    take(transcriber.poll())
    if on_event:
        on_event(final)
    return Replay(tuple(events), final, time.perf_counter() - t0, time.process_time() - c0)
