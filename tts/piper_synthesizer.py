"""The default backend: the embedded Piper voice (en_US-joe-medium, 22.05 kHz) on onnxruntime."""

from __future__ import annotations

import numpy as np

from tts.piper_voice import PiperOptions, PiperVoiceModel
from tts.synthesizer import Synthesizer


class PiperSynthesizer(Synthesizer):
    name = "piper"

    def __init__(self, voice: PiperVoiceModel, options: PiperOptions | None = None) -> None:
        super().__init__(voice.sample_rate)
        self.voice = voice
        self.options = options or PiperOptions()

    @classmethod
    def default(cls, *, threads: int = 1, options: PiperOptions | None = None) -> PiperSynthesizer:
        """The embedded voice ("piper-joe-medium" in parley.assets). One onnxruntime thread by
        default: STT and the LLM run beside it on the same cores."""
        if threads < 1:
            raise ValueError("threads must be >= 1")
        return cls(PiperVoiceModel.default(threads=threads), options)

    def _synthesize_impl(self, text: str) -> np.ndarray:  # [N] float32 at 22.05 kHz
        return self.voice.synthesize(text, self.options)
