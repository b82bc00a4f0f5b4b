"""A timed fake end-of-turn detector for pipeline tests: energy-gated speech, fires a fixed
silence after it ends, optionally sleeping per push to mimic the real cost."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parley.audio import ENGINE_RATE, validate_audio
from turn_detection.detector import EndOfTurn
from turn_detection.vad import WINDOW


@dataclass(frozen=True)
class FakeEndOfTurnDetector:
    silence_s: float = 0.3  # silence after speech before it fires
    push_delay_s: float = 0.0  # wall-clock sleep per push
    energy_threshold: float = 0.01  # frame RMS counted as speech
    probability: float = 0.9

    def __post_init__(self) -> None:
        if self.silence_s < 0 or self.push_delay_s < 0 or self.energy_threshold <= 0:
            raise ValueError("silence_s, push_delay_s must be >= 0 and energy_threshold > 0")

    def stream(self) -> _FakeStream:
        return _FakeStream(self)


class _FakeStream:
    def __init__(self, cfg: FakeEndOfTurnDetector):
        self._cfg = cfg
        self.reset()

    def reset(self) -> None:
        self._t = 0.0
        self._buffered = 0  # samples since the last complete 512-sample window
        self._speech_end: float | None = None
        self._fired = False

    def push_transcript(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError("transcript must be a str")

    def push(self, frame: np.ndarray, speech_probs: Sequence[float] | None = None) -> EndOfTurn | None:
        """Same contract as EndOfTurnStream.push: `speech_probs` must hold one value per
        512-sample window this push completes (checked, then unused: the fake gates on energy)."""
        x = validate_audio(frame, ENGINE_RATE, allow_empty=True)
        n = (self._buffered + len(x)) // WINDOW
        if speech_probs is not None and len(speech_probs) != n:
            raise ValueError(f"speech_probs has {len(speech_probs)} values, this push completes {n} windows")
        self._buffered = (self._buffered + len(x)) % WINDOW
        if self._cfg.push_delay_s:
            time.sleep(self._cfg.push_delay_s)
        self._t += len(x) / ENGINE_RATE
        if len(x) and float(np.sqrt(np.mean(x**2))) >= self._cfg.energy_threshold:
            self._speech_end, self._fired = self._t, False
            return None
        if self._speech_end is not None and not self._fired and self._t - self._speech_end >= self._cfg.silence_s:
            self._fired = True
            return EndOfTurn(time_s=self._t, probability=self._cfg.probability)
        return None
