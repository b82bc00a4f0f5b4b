"""A timed fake backend for pipeline tests: no model, predictable timing and audio.

Each chunk takes `first_audio_delay_s + rtf * duration` of wall time and returns a tone (or
silence) whose duration follows the text's length, so a pipeline test can check latencies,
barge-in and backpressure on a CPU in milliseconds.
"""

from __future__ import annotations

import time

import numpy as np

from tts.synthesizer import Synthesizer


class FakeSynthesizer(Synthesizer):
    name = "fake"

    def __init__(self, *, first_audio_delay_s: float = 0.05, rtf: float = 0.1, sample_rate: int = 22_050,
                 seconds_per_char: float = 0.06, tone_hz: float | None = 220.0, amplitude: float = 0.3) -> None:
        if first_audio_delay_s < 0 or rtf < 0 or seconds_per_char <= 0:
            raise ValueError("delays must be >= 0 and seconds_per_char > 0")
        if not 0 <= amplitude <= 1:
            raise ValueError("amplitude must be in [0, 1]")
        super().__init__(sample_rate)
        self.first_audio_delay_s, self.rtf = first_audio_delay_s, rtf
        self.seconds_per_char, self.tone_hz, self.amplitude = seconds_per_char, tone_hz, amplitude
        self.texts: list[str] = []  # every chunk it was asked to say, in order

    def _synthesize_impl(self, text: str) -> np.ndarray:  # [N] float32 at sample_rate
        duration = max(0.1, len(text) * self.seconds_per_char)
        time.sleep(self.first_audio_delay_s + self.rtf * duration)
        self.texts.append(text)
        n = round(duration * self.sample_rate)
        if self.tone_hz is None:
            return np.zeros(n, dtype=np.float32)
        t = np.arange(n, dtype=np.float32) / self.sample_rate
        return (self.amplitude * np.sin(2 * np.pi * self.tone_hz * t)).astype(np.float32)
