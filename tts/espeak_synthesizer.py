"""Fallback backend: the espeak-ng binary (formant synthesis: robotic, but instant and tiny).

Text goes in on stdin (never as an argument: a text starting with "-" would be an option),
a WAV comes back on stdout. espeak-ng streams its WAV, so the RIFF sizes in the header are
placeholders; parley.wav.parse_wav reads such a stream.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

from parley.errors import AudioFormatError, ModelNotFoundError
from parley.wav import parse_wav
from tts.synthesizer import SynthesisError, Synthesizer

_NATIVE_RATE = 22_050  # espeak-ng's output rate


class EspeakSynthesizer(Synthesizer):
    name = "espeak"

    def __init__(self, voice: str = "en-us", words_per_minute: int = 170, *, binary: str = "espeak-ng",
                 timeout_s: float = 30.0) -> None:
        if not 80 <= words_per_minute <= 450:
            raise ValueError("words_per_minute must be in [80, 450]")
        path = shutil.which(binary)
        if path is None:
            raise ModelNotFoundError("espeak-ng", f"{binary!r} is not on PATH", "apt-get install espeak-ng")
        super().__init__(_NATIVE_RATE)
        self.voice, self.words_per_minute = voice, words_per_minute
        self._binary, self._timeout_s = path, timeout_s

    def _synthesize_impl(self, text: str) -> np.ndarray:  # [N] float32 at 22.05 kHz
        cmd = [self._binary, "--stdout", "-v", self.voice, "-s", str(self.words_per_minute)]
        proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True,
                              timeout=self._timeout_s, check=False)
        if proc.returncode != 0:
            raise SynthesisError(f"espeak-ng exited with {proc.returncode}: {proc.stderr.decode()[:200]}")
        audio, rate = _parse_stream_wav(proc.stdout)
        if rate != self.sample_rate:
            raise SynthesisError(f"espeak-ng wrote {rate} Hz, expected {self.sample_rate} Hz")
        return audio


def _parse_stream_wav(data: bytes) -> tuple[np.ndarray, int]:
    """espeak-ng's streamed WAV (placeholder sizes) -> ([N] float32, rate)."""
    try:
        audio, rate = parse_wav(data, "espeak-ng output")
    except AudioFormatError as e:
        raise SynthesisError(str(e)) from e
    if audio.ndim != 1:
        raise SynthesisError(f"espeak-ng wrote {audio.shape[1]} channels, expected mono")
    return audio, rate
