"""Fallback backend: the espeak-ng binary (formant synthesis: robotic, but instant and tiny).

Text goes in on stdin (never as an argument: a text starting with "-" would be an option),
a WAV comes back on stdout. espeak-ng streams its WAV, so the RIFF sizes in the header are
placeholders; we read the format chunk and take everything after the data chunk's header.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np

from parley.errors import ModelNotFoundError
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
    """16-bit mono PCM from a streamed WAV (placeholder sizes). Returns ([N] float32, rate)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise SynthesisError("espeak-ng did not write a WAV")
    pos, rate = 12, None
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if cid == b"fmt ":
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[pos + 8 : pos + 24])
            if (tag, channels, bits) != (1, 1, 16):
                raise SynthesisError(f"unexpected espeak-ng format: tag {tag}, {channels} ch, {bits} bit")
        elif cid == b"data":
            if rate is None:
                raise SynthesisError("espeak-ng WAV has no fmt chunk before its data")
            body = data[pos + 8 :]
            body = body[: len(body) // 2 * 2]
            return np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768.0, int(rate)
        pos += 8 + size + (size & 1)
    raise SynthesisError("espeak-ng WAV has no data chunk")
