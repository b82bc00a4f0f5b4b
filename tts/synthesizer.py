"""The synthesizer interface. `synthesize` (one utterance) and `stream` (text deltas in, 20 ms
PCM frames out) are the public methods and own normalization, timing, metrics and errors;
a backend implements only `_synthesize_impl(text) -> float32 audio at its native rate`."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from parley.errors import ParleyError
from tts.normalize import normalize_text

if TYPE_CHECKING:
    from parley.cores import CoreGate
    from tts.stream import SpeechStream, StreamConfig


class SynthesisError(ParleyError):
    """A backend failed on a text. Not retryable by default (the same text fails again)."""


@dataclass(frozen=True)
class SynthesisMetrics:
    backend: str
    chars: int  # normalized characters synthesized
    audio_s: float  # seconds of audio produced
    seconds: float  # wall time of the backend call

    @property
    def rtf(self) -> float:
        """Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""
        return self.seconds / self.audio_s if self.audio_s > 0 else 0.0


@dataclass(frozen=True)
class Synthesis:
    audio: np.ndarray  # [N] float32 in [-1, 1] at sample_rate
    sample_rate: int
    text: str  # what was spoken (normalized)
    metrics: SynthesisMetrics


@dataclass
class SynthesizerStats:
    """Totals over a synthesizer's life (all threads)."""

    calls: int = 0
    chars: int = 0
    audio_s: float = 0.0
    seconds: float = 0.0

    @property
    def rtf(self) -> float:
        return self.seconds / self.audio_s if self.audio_s > 0 else 0.0


class Synthesizer(ABC):
    """Base class of the TTS backends (template method: see the module docstring)."""

    name: str = "synthesizer"

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = int(sample_rate)  # native output rate of the backend
        self.stats = SynthesizerStats()
        self._stats_lock = threading.Lock()
        self._kept: dict[str, np.ndarray] = {}  # remember(): normalized phrase -> its audio
        # held around every backend call: a backend with more than one thread asks the stage
        # beside it (the LLM engine) to step aside meanwhile (parley.cores)
        self.core_gate: CoreGate | None = None

    @abstractmethod
    def _synthesize_impl(self, text: str) -> np.ndarray:  # [N] float32 at self.sample_rate
        """Synthesize one normalized, non-empty chunk of text. May be called from any thread."""

    def synthesize(self, text: str, *, normalize: bool = True) -> Synthesis:
        """Blocking synthesis of a whole text. Empty or whitespace text gives empty audio."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        spoken = normalize_text(text) if normalize else text.strip()
        if not spoken:
            empty = SynthesisMetrics(self.name, 0, 0.0, 0.0)
            return Synthesis(np.zeros(0, dtype=np.float32), self.sample_rate, "", empty)
        kept = self._kept.get(spoken)
        if kept is not None:  # a remembered phrase: no backend call
            return Synthesis(kept.copy(), self.sample_rate, spoken,
                             SynthesisMetrics(self.name, len(spoken), len(kept) / self.sample_rate, 0.0))
        t0 = time.perf_counter()
        try:
            with self.core_gate.hold() if self.core_gate is not None else nullcontext():
                audio = self._synthesize_impl(spoken)
        except ParleyError:
            raise
        except Exception as e:  # a backend's own error types (onnxruntime, subprocess) become ours
            raise SynthesisError(f"{self.name} failed on {spoken[:60]!r}: {e}") from e
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if not np.isfinite(audio).all():
            raise SynthesisError(f"{self.name} produced NaN or infinite samples")
        metrics = SynthesisMetrics(self.name, len(spoken), len(audio) / self.sample_rate,
                                   time.perf_counter() - t0)
        with self._stats_lock:
            self.stats.calls += 1
            self.stats.chars += metrics.chars
            self.stats.audio_s += metrics.audio_s
            self.stats.seconds += metrics.seconds
        return Synthesis(audio, self.sample_rate, spoken, metrics)

    def stream(self, config: StreamConfig | None = None, **overrides) -> SpeechStream:
        """A streaming session: push text deltas, read 20 ms int16 frames (see tts.stream)."""
        from tts.stream import SpeechStream, StreamConfig

        cfg = config or StreamConfig(**overrides)
        if config is not None and overrides:
            raise ValueError("pass either a StreamConfig or keyword overrides, not both")
        return SpeechStream(self, cfg)

    def remember(self, phrases: tuple[str, ...] | list[str]) -> float:
        """Synthesize `phrases` now and keep their audio: a text (or stream chunk) that is
        exactly one of them is then spoken from memory. A voice session keeps its
        acknowledgements ("Okay."), which are said when the reply is already late; Piper took
        ~160-200 ms to start one in a session on a 2-core Zen 1, from memory 7-9 ms. -> the seconds it took (the first
        call is also the backend's warm-up)."""
        t0 = time.perf_counter()
        for phrase in phrases:
            done = self.synthesize(phrase)
            if done.text:
                self._kept[done.text] = done.audio
        return time.perf_counter() - t0

    def warmup(self) -> float:
        """Run the backend once (onnxruntime's first run allocates); returns its seconds."""
        return self.synthesize("Hello.").metrics.seconds

    def close(self) -> None:  # noqa: B027 (optional hook; most backends hold nothing)
        """Release backend resources (default: nothing to release)."""
