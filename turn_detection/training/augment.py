"""Augmentation of synthesized training speech, so the prosodic model meets more than a few
clean voices (issue 21: it was confidently wrong on unheard synthesizers, P 0.97 inside
pauses of flite / festival voices).

Two stages, each drawn from the caller's seeded generator:
- `perturb_speed` on the speech alone (before pauses are inserted): resampling by 0.88-1.12
  shifts the pitch by -2.2..+2.0 semitones and the tempo by the same factor, as speed
  perturbation does in speech recognition training.
- `channel` on the whole clip (speech and silence): level -20..+3 dB, band-limiting to
  telephone quality (300-3400 Hz), room reverberation (an exponentially decaying noise
  impulse response, RT60 0.15-0.6 s) and noise (white, pink or brown) at 10-30 dB SNR
  against the speech's own level. Each effect is applied with its own probability."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import butter, fftconvolve, sosfilt

from parley.audio import ENGINE_RATE, resample


@dataclass(frozen=True)
class AugmentConfig:
    speed: tuple[float, float] = (0.88, 1.12)
    p_speed: float = 0.7
    level_db: tuple[float, float] = (-20.0, 3.0)
    p_telephone: float = 0.3
    p_reverb: float = 0.3
    rt60_s: tuple[float, float] = (0.15, 0.6)
    p_noise: float = 0.5
    snr_db: tuple[float, float] = (10.0, 30.0)

    def __post_init__(self) -> None:
        for name in ("p_speed", "p_telephone", "p_reverb", "p_noise"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability")
        if not 0.5 <= self.speed[0] <= self.speed[1] <= 2.0:
            raise ValueError("speed range must lie in [0.5, 2]")
        if not 0.0 < self.rt60_s[0] <= self.rt60_s[1] <= 2.0:
            raise ValueError("rt60 range must lie in (0, 2] s")
        if self.level_db[0] > self.level_db[1] or self.snr_db[0] > self.snr_db[1]:
            raise ValueError("ranges must be (low, high)")


def perturb_speed(speech: np.ndarray, rng: np.random.Generator, cfg: AugmentConfig = AugmentConfig()) -> np.ndarray:
    """Play `speech` faster or slower (pitch and tempo together), or leave it."""
    if rng.random() >= cfg.p_speed:
        return speech
    factor = float(rng.uniform(*cfg.speed))
    # resampling from rate r*factor to r and playing at r speeds up by `factor`
    src = round(ENGINE_RATE * factor / 100) * 100
    return resample(speech, src, ENGINE_RATE) if src != ENGINE_RATE else speech


def _noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    white = rng.standard_normal(n)
    if color == "white":
        return white
    spec = np.fft.rfft(white)
    f = np.maximum(np.fft.rfftfreq(n, 1.0 / ENGINE_RATE), 20.0)
    spec /= np.sqrt(f) if color == "pink" else f  # 1/f or 1/f^2 power
    return np.fft.irfft(spec, n)


def _speech_power(audio: np.ndarray) -> float:
    """Mean power of the loud 10 ms frames (the speech, not the silence around it)."""
    n = len(audio) // 160
    if n == 0:
        return 0.0
    e = (audio[: n * 160].reshape(n, 160).astype(np.float64) ** 2).mean(axis=1)
    loud = e[e > e.max() * 10 ** (-3.0)]
    return float(loud.mean()) if len(loud) else 0.0


def channel(audio: np.ndarray, rng: np.random.Generator, cfg: AugmentConfig = AugmentConfig()) -> np.ndarray:
    """A clip as another microphone and room would give it (see the module doc)."""
    x = audio.astype(np.float64)
    if rng.random() < cfg.p_telephone:
        x = sosfilt(butter(4, (300.0, 3400.0), btype="bandpass", fs=ENGINE_RATE, output="sos"), x)
    if rng.random() < cfg.p_reverb:
        rt60 = float(rng.uniform(*cfg.rt60_s))
        t = np.arange(int(rt60 * ENGINE_RATE)) / ENGINE_RATE
        ir = rng.standard_normal(len(t)) * np.exp(-6.91 * t / rt60)  # -60 dB at rt60
        ir[0] = 1.0 / float(rng.uniform(0.3, 1.0))  # direct path against the reverberant part
        wet = fftconvolve(x, ir)[: len(x)]
        x = wet * np.sqrt(_speech_power(x) / max(_speech_power(wet), 1e-20))
    if rng.random() < cfg.p_noise:
        power = _speech_power(x)
        if power > 0:
            noise = _noise(len(x), str(rng.choice(["white", "pink", "brown"])), rng)
            snr = float(rng.uniform(*cfg.snr_db))
            x = x + noise * np.sqrt(power / 10 ** (snr / 10) / max(float(np.mean(noise**2)), 1e-20))
    x = x * 10 ** (float(rng.uniform(*cfg.level_db)) / 20)
    return np.clip(x, -1.0, 1.0).astype(np.float32)
