from __future__ import annotations

import numpy as np
import pytest

from turn_detection.training.augment import AugmentConfig, channel, perturb_speed
from turn_detection.training.families import family_sentences
from turn_detection.training.loso import FAMILY_ENGINE, fold_models
from turn_detection.training.pauses import VOICES, PauseSet, voice_sentences
from turn_detection.training.sentences import TRAIN

SR = 16000
OFF = dict(p_speed=0.0, p_telephone=0.0, p_reverb=0.0, p_noise=0.0, level_db=(0.0, 0.0))


def _tone_clip() -> np.ndarray:
    """1 s of 0.5 s silence, 1 s of a 150 Hz + 1 kHz tone, 0.5 s silence."""
    t = np.arange(SR) / SR
    speech = 0.3 * np.sin(2 * np.pi * 150 * t) + 0.1 * np.sin(2 * np.pi * 1000 * t)
    z = np.zeros(SR // 2)
    return np.concatenate([z, speech, z]).astype(np.float32)


def _band_power(x: np.ndarray, lo: float, hi: float) -> float:
    f = np.fft.rfftfreq(len(x), 1 / SR)
    return float((np.abs(np.fft.rfft(x)) ** 2)[(f >= lo) & (f < hi)].sum())


@pytest.mark.unit
def test_noise_lands_at_the_drawn_snr_against_the_speech():
    x = _tone_clip()
    cfg = AugmentConfig(**{**OFF, "p_noise": 1.0, "snr_db": (20.0, 20.0)})
    y = channel(x, np.random.default_rng(0), cfg)
    assert y.dtype == np.float32 and len(y) == len(x)
    noise = y - x
    speech_power = float(np.mean(x[SR // 2 : SR // 2 + SR] ** 2))
    snr = 10 * np.log10(speech_power / float(np.mean(noise**2)))
    assert 19.0 < snr < 21.0
    assert np.mean(y[: SR // 2] ** 2) > 0  # the pauses are noisy too, as in a room


@pytest.mark.unit
def test_telephone_band_removes_the_low_pitch_and_keeps_the_middle():
    x = _tone_clip()
    y = channel(x, np.random.default_rng(0), AugmentConfig(**{**OFF, "p_telephone": 1.0}))
    assert _band_power(y, 100, 200) < 0.05 * _band_power(x, 100, 200)
    assert _band_power(y, 900, 1100) > 0.5 * _band_power(x, 900, 1100)


@pytest.mark.unit
def test_reverb_leaves_a_tail_after_the_speech_and_level_scales():
    x = _tone_clip()
    y = channel(x, np.random.default_rng(1), AugmentConfig(**{**OFF, "p_reverb": 1.0, "rt60_s": (0.4, 0.4)}))
    tail = slice(SR // 2 + SR + 800, SR // 2 + SR + 2400)  # 50-150 ms after the tone stops
    assert np.sqrt(np.mean(y[tail] ** 2)) > 1e-3 and np.all(x[tail] == 0)
    quiet = channel(x, np.random.default_rng(0), AugmentConfig(**{**OFF, "level_db": (-20.0, -20.0)}))
    np.testing.assert_allclose(quiet, x * 0.1, atol=1e-6)


@pytest.mark.unit
def test_speed_perturbation_changes_duration_within_its_range():
    x = _tone_clip()
    cfg = AugmentConfig(p_speed=1.0, speed=(0.9, 1.1))
    slow, fast = cfg.speed
    ratios = [len(perturb_speed(x, np.random.default_rng(seed), cfg)) / len(x) for seed in range(5)]
    # faster speech is shorter: the duration ratio lies within [1 / fast, 1 / slow]
    assert all(1 / fast - 0.01 <= r <= 1 / slow + 0.01 for r in ratios), ratios
    assert len({round(r, 3) for r in ratios}) >= 3, ratios  # the speed is drawn, not fixed
    assert any(abs(r - 1) > 0.01 for r in ratios), ratios  # and it does change the duration
    assert perturb_speed(x, np.random.default_rng(0), AugmentConfig(p_speed=0.0)) is x


@pytest.mark.unit
@pytest.mark.parametrize("bad", [dict(p_noise=1.5), dict(speed=(1.2, 1.1)), dict(rt60_s=(0.0, 0.3)),
                                 dict(snr_db=(30.0, 10.0))])
def test_bad_augment_config_is_refused(bad):
    with pytest.raises(ValueError):
        AugmentConfig(**bad)


@pytest.mark.unit
def test_training_voices_speak_train_sentences_only_in_disjoint_slices():
    fam = set(family_sentences())
    for engine in {v.engine for v in VOICES}:
        slices = [set(voice_sentences(v, 60)) for v in VOICES if v.engine == engine]
        assert all(s <= set(TRAIN) and not s & fam for s in slices)
        assert sum(len(s) for s in slices) == len(set().union(*slices))  # no sentence twice in an engine
        # (while voices x sentences fit in TRAIN; beyond it the slices wrap around)
    assert {v.engine for v in VOICES} == set(FAMILY_ENGINE.values())


@pytest.mark.unit
@pytest.mark.parametrize("acoustic", [False, True], ids=["prosody", "acoustic"])
def test_fold_models_never_see_the_held_out_families_engine(acoustic):
    """flite data follows the opposite label rule: each model learns only the engines it saw
    (the prosodic MLP, or the acoustic witness's logistic head on 768 encoder features)."""
    rng = np.random.default_rng(0)
    from turn_detection.prosody import FEATURE_NAMES

    n, f = 600, 768 if acoustic else len(FEATURE_NAMES)
    x = rng.standard_normal((n, f))
    engines = np.array(["piper"] * 200 + ["espeak"] * 200 + ["flite"] * 200)
    y = np.where(engines != "flite", x[:, 0] > 0, x[:, 0] < 0).astype(float)
    models = fold_models(PauseSet(x, y, engines), ["piper", "espeak", "flite", "test-split"], hidden=4, l2=1.0,
                         seed=0, acoustic=acoustic)
    probe = np.zeros((2, f))
    probe[:, 0] = (-4.0, 4.0) if acoustic else (-2.0, 2.0)  # 200 examples in 768 dims: a weaker fit
    without_flite = 1 / (1 + np.exp(-models[frozenset(["flite"])].logits(probe)))
    without_piper = 1 / (1 + np.exp(-models[frozenset(["piper", "espeak"])].logits(probe)))
    assert without_flite[1] > 0.9 > 0.1 > without_flite[0]  # learned piper's rule only
    assert without_piper[0] > 0.9 > 0.1 > without_piper[1]
    # the old test split has no engine of its own: leaving it out changes nothing
    assert models[frozenset(["test-split"])] is models[frozenset()]
