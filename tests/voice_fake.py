"""A timed fake voice session for the voice benchmark's tests: the same boundary as the real
one (pipeline/transport.py: `fake_session_factory(config) -> SessionFactory`, a handle with
`push_audio` and `aclose`), with deterministic behaviour instead of models.

It hears speech as samples above `speech_level`; `endpoint_s` of silence after speech ends
the turn; the reply's first frame is then due exactly `reply_delay_s` after the last speech
sample (on the wall clock, where the pushed audio's sample s of a frame pushed at time w was
spoken at w - (frame length - s) / rate, as from a microphone). The reply is `reply_s` of a
constant tone in 20 ms frames, paced in real time; speech while it plays interrupts it.
Turn k's final transcript is `transcripts[k]` (the last one repeats). With `greeting_s`, the
agent speaks first as the session starts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from parley.audio import validate_audio
from pipeline.transport import AudioSink, EventSink, SessionFactory

RATE = 16_000
FRAME = 320


@dataclass(frozen=True)
class FakeSessionConfig:
    reply_delay_s: float = 0.3
    endpoint_s: float = 0.2
    reply_s: float = 0.3
    transcripts: tuple[str, ...] = ("hello",)
    speech_level: float = 0.05
    reply_level: float = 0.3
    greeting_s: float = 0.0  # > 0: the agent speaks first, this long, as the session starts

    def __post_init__(self) -> None:
        if not 0.0 < self.endpoint_s < self.reply_delay_s - 0.02:
            raise ValueError("need 0 < endpoint_s < reply_delay_s - one frame (the reply is scheduled at endpoint)")
        if self.reply_s <= 0 or not self.transcripts:
            raise ValueError("reply_s must be > 0 and transcripts non-empty")


class FakeSession:
    def __init__(self, config: FakeSessionConfig, audio_sink: AudioSink, event_sink: EventSink) -> None:
        self.config = config
        self._audio, self._event = audio_sink, event_sink
        self._loop = asyncio.get_running_loop()
        self._speech_end: float | None = None  # wall time of the last speech sample, while a turn is open
        self._reply: asyncio.Task | None = None
        self.turn = 0
        self._event({"type": "state", "agent": "listening"})
        if config.greeting_s > 0:
            self._reply = self._loop.create_task(self._speak(None, time.monotonic(), config.greeting_s))

    def push_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        x = validate_audio(pcm, sample_rate)  # AudioFormatError on a bad frame
        now = time.monotonic()
        loud = np.flatnonzero(np.abs(x) >= self.config.speech_level)
        if len(loud):
            if self._reply is not None and not self._reply.done():
                self._reply.cancel()
                self._event({"type": "interrupt", "turn": self.turn})
                self._event({"type": "state", "agent": "listening"})
            if self._speech_end is None:
                self._event({"type": "vad", "speaking": True, "t": now - (len(x) - int(loud[0])) / RATE})
            self._speech_end = now - (len(x) - 1 - int(loud[-1])) / RATE  # just after the last loud sample
        elif self._speech_end is not None and now - self._speech_end >= self.config.endpoint_s:
            self._end_turn()

    def _end_turn(self) -> None:
        cfg, turn = self.config, self.turn
        text = cfg.transcripts[min(turn, len(cfg.transcripts) - 1)]
        due = self._speech_end + cfg.reply_delay_s
        self._event({"type": "vad", "speaking": False, "t": self._speech_end})
        self._speech_end = None
        self._event({"type": "state", "agent": "thinking"})
        self._event({"type": "transcript", "final": True, "text": text, "turn": turn})
        self._event({"type": "reply", "text": f"You said: {text}", "final": True, "turn": turn})
        self._reply = self._loop.create_task(self._speak(turn, due, cfg.reply_s))
        self.turn += 1

    async def _speak(self, turn: int | None, due: float, seconds: float) -> None:
        frame = np.full(FRAME, round(self.config.reply_level * 32767), dtype=np.int16)
        for k in range(round(seconds * RATE / FRAME)):
            await asyncio.sleep(max(0.0, due + k * FRAME / RATE - time.monotonic()))
            if k == 0:
                self._event({"type": "state", "agent": "speaking"})
                if turn is not None:
                    self._budget(turn)
            self._audio(frame, RATE)
        await asyncio.sleep(max(0.0, due + seconds - time.monotonic()))
        self._event({"type": "state", "agent": "listening"})

    def _budget(self, turn: int) -> None:
        cfg = self.config
        stages = [("endpointing", 1000 * cfg.endpoint_s, 250.0),
                  ("first_audio", 1000 * (cfg.reply_delay_s - cfg.endpoint_s), 350.0)]
        self._event({"type": "budget", "turn": turn, "perceived_ms": 1000 * cfg.reply_delay_s, "budget_ms": 600.0,
                     "stages": [{"name": n, "ms": ms, "allotment_ms": a, "overrun": ms > a} for n, ms, a in stages],
                     "overruns": [n for n, ms, a in stages if ms > a],
                     "marks": {"speech_end": 0.0, "end_of_turn": cfg.endpoint_s, "output_first_frame": cfg.reply_delay_s}})

    async def aclose(self) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.cancel()


def fake_session_factory(config: FakeSessionConfig) -> SessionFactory:
    async def factory(audio_sink: AudioSink, event_sink: EventSink) -> FakeSession:
        return FakeSession(config, audio_sink, event_sink)

    return factory
