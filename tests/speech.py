"""Speech the tests synthesize themselves (no recorded data in the repo): the embedded Piper
voice, and espeak-ng voices when the binary is installed. Clips are cached per process."""

from __future__ import annotations

import functools
import shutil

import numpy as np

from parley.audio import resample


@functools.lru_cache(maxsize=1)
def _piper():
    from tts.piper_voice import PiperVoiceModel

    return PiperVoiceModel.default()


@functools.lru_cache(maxsize=256)
def piper_speech(text: str, rate: int = 16_000, length_scale: float = 1.0) -> np.ndarray:
    """[N] float32 mono at `rate` (read-only: copy before changing it)."""
    from tts.piper_voice import PiperOptions

    voice = _piper()
    audio = voice.synthesize(text, PiperOptions(length_scale=length_scale, noise_scale=0.0, noise_w_scale=0.0))
    out = resample(audio, voice.sample_rate, rate)
    out.setflags(write=False)
    return out


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


@functools.lru_cache(maxsize=256)
def espeak_speech(text: str, rate: int = 16_000, voice: str = "en-us", wpm: int = 165) -> np.ndarray:
    from tts import EspeakSynthesizer

    out = EspeakSynthesizer(voice, wpm).synthesize(text, normalize=False)
    audio = resample(out.audio, out.sample_rate, rate)
    audio.setflags(write=False)
    return audio


def with_silence(audio: np.ndarray, before_s: float = 0.3, after_s: float = 0.8, rate: int = 16_000) -> np.ndarray:
    z = lambda s: np.zeros(int(s * rate), dtype=np.float32)  # noqa: E731
    return np.concatenate([z(before_s), audio, z(after_s)])
