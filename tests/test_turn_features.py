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
