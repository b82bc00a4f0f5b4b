"""The prosodic end-of-turn features."""

import numpy as np
import pytest

from turn_detection.prosody import FEATURE_NAMES, RATE, prosodic_features


def _tone(f0: np.ndarray, amp: float = 0.3) -> np.ndarray:
    """A harmonic-rich voiced signal with instantaneous pitch f0 [N] Hz."""
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    return (amp * sum(np.sin(k * phase) / k for k in range(1, 6))).astype(np.float32)


@pytest.mark.unit
def test_falling_and_rising_pitch_show_in_the_pitch_cues():
    n = int(1.5 * RATE)
    falling = prosodic_features(_tone(np.linspace(200.0, 110.0, n)))
    rising = prosodic_features(_tone(np.linspace(110.0, 200.0, n)))
    names = list(FEATURE_NAMES)
    for cue in ("pitch_slope_300", "pitch_slope_800", "pitch_end_st"):
        assert falling[names.index(cue)] < 0 < rising[names.index(cue)], cue
    assert falling[names.index("voiced_frac_300")] == 1.0
    assert falling[names.index("pitch_range_st")] > 5.0  # 200 -> 110 Hz is ~10 semitones


@pytest.mark.unit
@pytest.mark.parametrize("audio", [np.zeros(0, np.float32), np.zeros(RATE, np.float32),
                                   np.full(300, 0.1, np.float32)], ids=["empty", "silence", "short"])
def test_features_of_degenerate_audio_are_finite(audio):
    got = prosodic_features(audio)
    assert got.shape == (len(FEATURE_NAMES),) and np.isfinite(got).all()


def _yin_reference(x: np.ndarray):
    """The slow, readable YIN the fast pitch_track must equal: per frame, the difference
    function d(tau) = sum_{j<w} (x_j - x_{j+tau})^2 summed directly, its cumulative-mean
    normalization, the first dip under the threshold walked to its minimum."""
    from turn_detection import prosody as p

    w = p.WIN - p.MAX_LAG
    out = []
    for start in range(0, len(x) - p.WIN + 1, p.HOP):
        fr = x[start : start + p.WIN].astype(np.float64)
        fr = fr - fr.mean()
        d = np.array([((fr[:w] - fr[tau : tau + w]) ** 2).sum() for tau in range(p.MAX_LAG + 1)])
        cmnd = d[1:] / (np.cumsum(d[1:]) / np.arange(1, p.MAX_LAG + 1))
        seg = cmnd[p.MIN_LAG - 1 :]  # lags MIN_LAG .. MAX_LAG
        below = np.flatnonzero(seg < p.YIN_THRESHOLD)
        lag = int(below[0]) if len(below) else int(seg.argmin())
        for _ in range(8):
            if lag + 1 < len(seg) and seg[lag + 1] < seg[lag]:
                lag += 1
        energy = 10 * np.log10((fr[:w] ** 2).mean() + 1e-10)
        out.append((p.RATE / (lag + p.MIN_LAG), seg[lag], energy))
    f0, dip, energy = (np.array(c) for c in zip(*out))
    voiced = (dip < p.VOICED_CMND) & (energy > energy.max() - 35.0)
    return np.where(voiced, f0, 0.0), voiced, energy


@pytest.mark.unit
@pytest.mark.parametrize("seconds", [0.05, 0.37, 1.3])  # 1, 33 and 126 frames: partial last blocks
def test_pitch_track_equals_the_direct_yin(seconds):
    from turn_detection.prosody import pitch_track

    rng = np.random.default_rng(7)
    n = int(seconds * RATE)
    x = _tone(np.linspace(220.0, 95.0, n))
    x[n // 3 : n // 2] = 0.01 * rng.standard_normal(n // 2 - n // 3)  # an unvoiced stretch
    f0, voiced, energy, tilt = pitch_track(x)
    ref_f0, ref_voiced, ref_energy = _yin_reference(x)
    assert len(f0) == len(ref_f0) == 1 + (n - 640) // 160
    np.testing.assert_array_equal(voiced, ref_voiced)
    np.testing.assert_allclose(f0, ref_f0, rtol=1e-12)
    np.testing.assert_allclose(energy, ref_energy, atol=1e-9)
    assert np.isfinite(tilt).all() and len(tilt) == len(f0)
    if len(f0) > 10:  # the comparison covered both kinds of frame
        assert voiced.any() and not voiced.all()
