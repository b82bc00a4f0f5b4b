"""A timed fake of the streaming transcriber for pipeline tests: scripted text, configurable
delays, the same public methods and event rules as StreamingTranscriber, no model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np

from parley.audio import AudioFrame, validate_audio
from stt.decoder import SAMPLE_RATE
from stt.events import TranscriptEvent, Word
from stt.speech_gate import CHUNK, check_speech_probs


class FakeTranscriber:
    """Reveals the scripted text of turn k (script[k % len]) one word per `words_per_s` of
    audio pushed, as interims; a preflight once all words are out; final `final_delay_s`
    after flush (in a thread, like the real one). Silence-only turns give an empty final."""

    def __init__(self, script: list[str] | tuple[str, ...] = ("hello there",), *, words_per_s: float = 3.0,
                 interim_delay_s: float = 0.0, final_delay_s: float = 0.05, silence_rms: float = 1e-3) -> None:
        if not script or words_per_s <= 0 or interim_delay_s < 0 or final_delay_s < 0:
            raise ValueError("need a non-empty script, words_per_s > 0 and delays >= 0")
        self.script = [s.split() for s in script]
        self.words_per_s, self.interim_delay_s, self.final_delay_s = words_per_s, interim_delay_s, final_delay_s
        self.silence_rms = silence_rms
        self.prompt = ""
        self._lock = threading.Lock()
        self._turn = 0
        self._pushed = 0  # samples ever pushed: VAD windows count from the first
        self._reset_state()

    def _reset_state(self) -> None:
        self._speech_s = 0.0
        self._audio_s = 0.0
        self._shown = 0
        self._pending: list[tuple[float, TranscriptEvent]] = []  # (ready at wall, event)

    def _words(self) -> list[str]:
        return self.script[self._turn % len(self.script)]

    def _event(self, kind: str, n: int) -> TranscriptEvent:
        ws = self._words()[:n]
        words = tuple(Word(w, i / self.words_per_s, (i + 1) / self.words_per_s) for i, w in enumerate(ws))
        text = " ".join(ws)
        return TranscriptEvent(kind, text, text, words, self._audio_s, self.interim_delay_s, 0.0, self._turn)

    def push(self, audio: np.ndarray | AudioFrame, sample_rate: int = SAMPLE_RATE, *,
             speech_probs: Sequence[float] | None = None) -> list[TranscriptEvent]:
        """As StreamingTranscriber.push. With `speech_probs` (same count rule), speech is the
        windows with probability >= 0.5 instead of frames louder than `silence_rms`."""
        if isinstance(audio, AudioFrame):
            x = validate_audio(audio.samples, audio.sample_rate)
        else:
            x = validate_audio(audio, sample_rate)
        with self._lock:
            probs = None if speech_probs is None else check_speech_probs(speech_probs, self._pushed, len(x))
            self._pushed += len(x)
            self._audio_s += len(x) / SAMPLE_RATE
            if probs is not None:
                self._speech_s += int((probs >= 0.5).sum()) * CHUNK / SAMPLE_RATE
            elif float(np.sqrt(np.mean(x * x))) > self.silence_rms:
                self._speech_s += len(x) / SAMPLE_RATE
            n = min(len(self._words()), int(self._speech_s * self.words_per_s))
            if n > self._shown:
                self._shown = n
                kind = "preflight" if n == len(self._words()) else "interim"
                self._pending.append((time.perf_counter() + self.interim_delay_s, self._event(kind, n)))
            return self._ready()

    def _ready(self) -> list[TranscriptEvent]:
        now = time.perf_counter()
        out = [e for t, e in self._pending if t <= now]
        self._pending = [(t, e) for t, e in self._pending if t > now]
        return out

    def poll(self) -> list[TranscriptEvent]:
        with self._lock:
            return self._ready()

    def set_prompt(self, previous_turns_text: str) -> None:
        self.prompt = previous_turns_text or ""

    def flush_future(self) -> Future:
        fut: Future = Future()
        t0 = time.perf_counter()
        with self._lock:
            n = len(self._words()) if self._speech_s > 0 else 0
            event = self._event("final", n)
            self._turn += 1
            self._reset_state()

        def finish() -> None:
            time.sleep(self.final_delay_s)
            fut.set_result(TranscriptEvent("final", event.text, event.text, event.words, event.audio_time_s,
                                           time.perf_counter() - t0, 0.0, event.turn))

        threading.Thread(target=finish, daemon=True).start()
        return fut

    def flush(self, timeout: float | None = None) -> TranscriptEvent:
        return self.flush_future().result(timeout)

    async def aflush(self) -> TranscriptEvent:
        return await asyncio.wrap_future(self.flush_future())

    def reset(self) -> None:
        with self._lock:
            self._turn += 1
            self._reset_state()

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeTranscriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
