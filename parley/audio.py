"""Audio frames and conversion. Inside the engines audio is 16 kHz mono float32 in [-1, 1]."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import gcd

import numpy as np

from parley.errors import AudioFormatError

ENGINE_RATE = 16_000
MIN_RATE, MAX_RATE = 8_000, 192_000
_ACCEPTED_DTYPES = (np.int16, np.int32, np.float32, np.float64)
# Float input far above full scale is almost always int16 values passed as float: refuse it
# rather than clip it into a square wave. Mild overs (codec overshoot) are clipped.
_MAX_FLOAT_PEAK = 2.0


@dataclass(frozen=True)
class AudioFrame:
    """A run of mono float32 samples. `timestamp_s` is the stream time of the first sample."""

    samples: np.ndarray  # [N] float32
    sample_rate: int = ENGINE_RATE
    timestamp_s: float = 0.0

    def __post_init__(self) -> None:
        _check_rate(self.sample_rate)
        if not isinstance(self.samples, np.ndarray) or self.samples.dtype != np.float32:
            raise AudioFormatError("AudioFrame.samples must be a float32 numpy array")
        if self.samples.ndim != 1:
            raise AudioFormatError(f"AudioFrame.samples must be mono [N], got shape {self.samples.shape}")

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate

    @property
    def end_s(self) -> float:
        return self.timestamp_s + self.duration_s


def _check_rate(sample_rate: int) -> None:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer):
        raise AudioFormatError(f"sample_rate must be an int, got {type(sample_rate).__name__}")
    if not MIN_RATE <= int(sample_rate) <= MAX_RATE:
        raise AudioFormatError(f"sample_rate {sample_rate} Hz is outside {MIN_RATE}-{MAX_RATE} Hz")


def int16_to_float(samples: np.ndarray) -> np.ndarray:
    return (np.asarray(samples, dtype=np.int16).astype(np.float32)) / 32768.0


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    x = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return np.round(x * 32767.0).astype(np.int16)


def to_mono(samples: np.ndarray) -> np.ndarray:
    """[N] stays; [N, C] (channels last, as WAV files and soundfile lay them out) is averaged."""
    if samples.ndim == 1:
        return samples
    if samples.ndim == 2:
        return samples.mean(axis=1, dtype=np.float64).astype(samples.dtype, copy=False)
    raise AudioFormatError(f"audio must be [N] or [N, channels], got shape {samples.shape}")


def resample(samples: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    """One-shot polyphase resampling of a whole buffer (zero phase). Streams use Resampler."""
    _check_rate(src_rate)
    _check_rate(dst_rate)
    if src_rate == dst_rate or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    g = gcd(int(src_rate), int(dst_rate))
    out = resample_poly(samples.astype(np.float32, copy=False), dst_rate // g, src_rate // g)
    return out.astype(np.float32, copy=False)


def validate_audio(
    samples: np.ndarray,
    sample_rate: int,
    *,
    target_rate: int = ENGINE_RATE,
    allow_empty: bool = False,
) -> np.ndarray:
    """Check and convert any accepted input to mono float32 at `target_rate`.

    Accepts int16/int32 PCM or float32/float64 in [-1, 1], mono [N] or [N, channels].
    Raises AudioFormatError (a ValueError) for other dtypes, NaN/inf, empty buffers and
    impossible sample rates.
    """
    _check_rate(sample_rate)
    if not isinstance(samples, np.ndarray):
        raise AudioFormatError(f"audio must be a numpy array, got {type(samples).__name__}")
    if samples.dtype not in _ACCEPTED_DTYPES:
        raise AudioFormatError(
            f"audio dtype {samples.dtype} is not supported (use int16, int32, float32 or float64)"
        )
    if samples.size == 0:
        if allow_empty:
            return np.zeros(0, dtype=np.float32)
        raise AudioFormatError("audio buffer is empty")
    x = to_mono(samples)
    if x.dtype == np.int16:
        x = x.astype(np.float32) / 32768.0
    elif x.dtype == np.int32:
        x = (x.astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        if not np.isfinite(x).all():
            raise AudioFormatError("audio contains NaN or infinite samples")
        peak = float(np.abs(x).max())
        if peak > _MAX_FLOAT_PEAK:
            raise AudioFormatError(
                f"float audio must be in [-1, 1]; peak is {peak:.1f} (int16 values passed as float?)"
            )
        x = np.clip(x, -1.0, 1.0).astype(np.float32, copy=False)
    return resample(x, int(sample_rate), target_rate)


def frames(
    samples: np.ndarray, sample_rate: int = ENGINE_RATE, frame_ms: float = 20.0, start_s: float = 0.0
) -> Iterator[AudioFrame]:
    """Split a mono float32 buffer into frames of `frame_ms` (the last one may be shorter)."""
    if frame_ms <= 0:
        raise ValueError("frame_ms must be positive")
    x = validate_audio(samples, sample_rate, target_rate=sample_rate, allow_empty=True)
    step = max(1, round(sample_rate * frame_ms / 1000.0))
    for i in range(0, len(x), step):
        yield AudioFrame(x[i : i + step], sample_rate, start_s + i / sample_rate)


class Resampler:
    """Streaming polyphase resampler: feed frames of any size, get the converted samples.

    A one-shot `resample` per 20 ms frame would put a filter edge at every frame boundary
    (audible clicks); this keeps the filter's history across calls instead. Delay: half the
    filter length, about 0.6 ms at 48 -> 16 kHz.
    """

    def __init__(self, src_rate: int, dst_rate: int, *, taps_per_phase: int = 24) -> None:
        _check_rate(src_rate)
        _check_rate(dst_rate)
        from scipy.signal import firwin

        g = gcd(int(src_rate), int(dst_rate))
        self.src_rate, self.dst_rate = int(src_rate), int(dst_rate)
        self.up, self.down = self.dst_rate // g, self.src_rate // g
        n_taps = taps_per_phase * self.up
        h = firwin(n_taps, 1.0 / max(self.up, self.down), window=("kaiser", 8.0)) * self.up
        # polyphase bank: row p holds taps p, p+up, p+2up ...  [up, K]
        self._bank = h.reshape(taps_per_phase, self.up).T.astype(np.float32)
        self._k = taps_per_phase
        self._hist = np.zeros(self._k - 1, dtype=np.float32)  # last K-1 inputs
        self._consumed = 0  # input samples seen
        self._next_out = 0  # index of the next output sample

    def process(self, samples: np.ndarray) -> np.ndarray:
        x = np.asarray(samples, dtype=np.float32)
        if self.up == self.down:
            return x.copy()
        buf = np.concatenate([self._hist, x])  # buf[j] is input (consumed - (K-1) + j)
        base = self._consumed - (self._k - 1)
        total = self._consumed + len(x)
        # output m needs input floor(m*down/up) to exist
        last_m = (total * self.up - 1) // self.down
        m = np.arange(self._next_out, last_m + 1, dtype=np.int64)
        if len(m):
            pos = m * self.down
            i0 = pos // self.up - base  # [M] index of the newest input in buf
            phase = pos % self.up
            idx = i0[:, None] - np.arange(self._k)[None, :]  # [M, K]
            out = np.einsum("mk,mk->m", buf[idx], self._bank[phase])
        else:
            out = np.zeros(0, dtype=np.float32)
        self._next_out = last_m + 1
        self._consumed = total
        self._hist = buf[len(buf) - (self._k - 1) :].copy()
        return out.astype(np.float32, copy=False)
