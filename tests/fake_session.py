"""A fake voice session for transport tests, with the two methods of pipeline.transport's
SessionHandle. It listens with an energy threshold; on speech followed by silence it emits
the events a real session emits (vad, transcript, state, reply, budget) and a few hundred ms
of tone as agent audio, paced in real time. `recognize` (blocking, run in a thread) may turn
the turn's audio into text, e.g. Whisper, so a test can check what actually arrived."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parley.audio import float_to_int16, validate_audio
from pipeline.transport import AudioSink, EventSink

RATE = 16_000
CHUNK = 320  # 20 ms: the unit of the energy detector
# The design's budget (DESIGN.md): stage allotments summing to the 600 ms perceived target.
STAGES = (("endpointing", 250.0), ("transcript", 50.0), ("first token", 60.0),
          ("first clause", 100.0), ("first audio", 100.0), ("playout", 40.0))


@dataclass(frozen=True)
class FakeSessionConfig:
    speech_rms: float = 0.01
    start_frames: int = 3  # 60 ms above the threshold starts speech
    min_speech_s: float = 0.2
    end_silence_s: float = 0.3
    reply_s: float = 0.4
    output_rate: int = 24_000
    think_s: float = 0.03

    def __post_init__(self) -> None:
        if self.speech_rms <= 0 or self.start_frames < 1 or self.reply_s <= 0 or self.end_silence_s <= 0:
            raise ValueError("speech_rms, start_frames, reply_s and end_silence_s must be positive")


class FakeSession:
    def __init__(self, audio_sink: AudioSink, event_sink: EventSink, config: FakeSessionConfig,
                 recognize: Callable[[np.ndarray], str] | None = None) -> None:
        self._audio_sink, self._emit = audio_sink, event_sink
        self.config = config
        self._recognize = recognize
        self._pending = np.zeros(0, dtype=np.float32)
        self._run = 0  # consecutive loud chunks while not speaking
        self._silence = 0
        self._speaking = False
        self._utterance: list[np.ndarray] = []
        self._speech_end_t = 0.0
        self._reply_task: asyncio.Task | None = None
        self.turn = 0
        self.received: list[np.ndarray] = []  # every pushed frame, float32 at 16 kHz
        self.interrupted = 0
        self.replies_cancelled = 0
        self.frames_sent = 0
        self.aclose_calls = 0
        self.closed = False

    # -- SessionHandle -------------------------------------------------------------------

    def push_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        x = validate_audio(pcm, sample_rate)  # AudioFormatError for bad frames, as the real one
        if self.closed:
            return
        self.received.append(x)
        self._pending = np.concatenate([self._pending, x])
        while len(self._pending) >= CHUNK:
            chunk, self._pending = self._pending[:CHUNK], self._pending[CHUNK:]
            self._step(chunk)

    async def aclose(self) -> None:
        self.aclose_calls += 1
        self.closed = True
        await self._cancel_reply()

    # -- listening -----------------------------------------------------------------------

    def _step(self, chunk: np.ndarray) -> None:
        loud = float(np.sqrt(np.mean(chunk**2))) > self.config.speech_rms
        if not self._speaking:
            self._run = self._run + 1 if loud else 0
            self._utterance = [*self._utterance[-self.config.start_frames:], chunk]
            if self._run >= self.config.start_frames:
                self._start_speech()
            return
        self._utterance.append(chunk)
        if loud:
            self._silence = 0
            self._speech_end_t = time.monotonic()
            if len(self._utterance) % 25 == 0:  # an interim every 0.5 s of speech
                self._emit({"type": "transcript", "final": False, "turn": self.turn,
                            "text": f"(listening, {len(self._utterance) * CHUNK / RATE:.1f} s)"})
            return
        self._silence += 1
        if self._silence * CHUNK / RATE >= self.config.end_silence_s:
            self._end_speech()

    def _start_speech(self) -> None:
        self._speaking, self._silence = True, 0
        self._speech_end_t = time.monotonic()
        if self._reply_task is not None and not self._reply_task.done():
            self._reply_task.cancel()
            self.replies_cancelled += 1
            self.interrupted += 1
            self._emit({"type": "interrupt", "turn": self.turn})
        self.turn += 1
        self._emit({"type": "vad", "speaking": True, "t": time.monotonic()})
        self._emit({"type": "state", "agent": "listening"})

    def _end_speech(self) -> None:
        self._speaking = False
        self._run = 0
        audio = np.concatenate(self._utterance[: len(self._utterance) - self._silence])
        self._utterance = []
        self._emit({"type": "vad", "speaking": False, "t": time.monotonic()})
        if len(audio) / RATE >= self.config.min_speech_s:
            self._reply_task = asyncio.get_running_loop().create_task(
                self._reply(self.turn, audio, self._speech_end_t, time.monotonic()), name="fake-reply")

    # -- replying ------------------------------------------------------------------------

    async def _reply(self, turn: int, audio: np.ndarray, speech_end_t: float, eot_t: float) -> None:
        self._emit({"type": "state", "agent": "thinking"})
        if self._recognize is not None:
            text = await asyncio.to_thread(self._recognize, audio)
        else:
            text = f"({len(audio) / RATE:.1f} s of speech)"
        t_final = time.monotonic()
        self._emit({"type": "transcript", "final": True, "text": text, "turn": turn})
        await asyncio.sleep(self.config.think_s)
        t_token = time.monotonic()
        words = f"You said: {text}".split()
        for i in range(1, len(words) + 1):
            self._emit({"type": "reply", "text": " ".join(words[:i]), "final": False, "turn": turn})
        t_clause = time.monotonic()
        self._emit({"type": "state", "agent": "speaking"})
        rate = self.config.output_rate
        n = rate // 50
        t = np.arange(round(self.config.reply_s * rate)) / rate
        tone = float_to_int16(0.3 * np.sin(2 * np.pi * 440.0 * t) * np.minimum(1.0, t / 0.01))
        for i, start in enumerate(range(0, len(tone), n)):
            self._audio_sink(tone[start : start + n], rate)
            self.frames_sent += 1
            if i == 0:
                self._emit(self._budget(turn, speech_end_t, (eot_t, t_final, t_token, t_clause, time.monotonic())))
            await asyncio.sleep(0.02)
        self._emit({"type": "reply", "text": " ".join(words), "final": True, "turn": turn})
        self._emit({"type": "state", "agent": "listening"})

    def _budget(self, turn: int, speech_end_t: float, marks: tuple[float, ...]) -> dict:
        times = [speech_end_t, *marks]
        stages = []
        for k, (name, allot) in enumerate(STAGES):
            ms = (times[k + 1] - times[k]) * 1000 if k + 1 < len(times) else None  # playout: not measured
            stages.append({"name": name, "ms": ms, "allotment_ms": allot, "overrun": ms is not None and ms > allot})
        perceived = (times[-1] - speech_end_t) * 1000
        return {"type": "budget", "turn": turn, "perceived_ms": perceived, "budget_ms": 600.0, "stages": stages,
                "overruns": [s["name"] for s in stages if s["overrun"]],
                "marks": {"speech_end": speech_end_t, "first_frame": times[-1]}}

    async def _cancel_reply(self) -> None:
        task, self._reply_task = self._reply_task, None
        if task is not None and not task.done():
            task.cancel()
            self.replies_cancelled += 1
            with contextlib.suppress(asyncio.CancelledError):
                await task


class FakeSessionFactory:
    """A SessionFactory that keeps every session it made (`sessions`) for the test to inspect."""

    def __init__(self, config: FakeSessionConfig | None = None,
                 recognize: Callable[[np.ndarray], str] | None = None) -> None:
        self.config = config or FakeSessionConfig()
        self.recognize = recognize
        self.sessions: list[FakeSession] = []

    async def __call__(self, audio_sink: AudioSink, event_sink: EventSink) -> FakeSession:
        session = FakeSession(audio_sink, event_sink, self.config, self.recognize)
        self.sessions.append(session)
        return session
