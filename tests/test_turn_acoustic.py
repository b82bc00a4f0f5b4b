"""The acoustic witness (Whisper's encoder states at a pause): pooling, its head, and the
detector reading it once per pause as the training code does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from parley.errors import ModelCorruptError, ModelNotFoundError
from parley.wav import read_wav
from turn_detection.acoustic import AcousticClassifier, WhisperEncoder, encoder_features
from turn_detection.detector import EndOfTurnDetector
from turn_detection.policy import EndpointingPolicy

CLIPS = Path(__file__).parent / "data" / "turn_families"


@pytest.mark.unit
def test_encoder_features_average_the_last_half_second_of_speech_then_the_silence():
    states = np.zeros((100, 3), np.float32)  # [T, D], one state per 20 ms
    states[:, 0] = np.arange(100)
    states[80:, 1] = 1.0  # the silence after the speech (from 1.6 s)
    f = encoder_features(states, 1.6)
    assert f.shape == (6,)
    np.testing.assert_allclose(f[:3], [np.arange(55, 80).mean(), 0.0, 0.0])  # 25 states before 1.6 s
    np.testing.assert_allclose(f[3:], [np.arange(80, 100).mean(), 1.0, 0.0])


def _head(width: int = 4) -> AcousticClassifier:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, width)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=200) > 0).astype(np.float64)
    return AcousticClassifier.fit(x, y, l2=1.0)


@pytest.mark.unit
def test_the_head_learns_a_direction_and_round_trips_through_its_file(tmp_path):
    head = _head()
    assert head.probability(np.array([2.0, 0, 0, 0], np.float32)) > 0.9
    assert head.probability(np.array([-2.0, 0, 0, 0], np.float32)) < 0.1
    head.save(tmp_path / "h.npz")
    back = AcousticClassifier.load(tmp_path / "h.npz")
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(back.logits(x), head.logits(x), rtol=1e-5, atol=1e-5)
    assert back.model == "whisper-tiny.en"


@pytest.mark.unit
def test_bad_head_files_and_shapes_give_clear_errors(tmp_path):
    with pytest.raises(ModelNotFoundError):
        AcousticClassifier.load(tmp_path / "missing.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelCorruptError):
        AcousticClassifier.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "short.npz", mean=np.zeros(4), scale=np.ones(4))
    with pytest.raises(ModelCorruptError):
        AcousticClassifier.load(tmp_path / "short.npz")
    with pytest.raises(ValueError, match="shapes"):
        AcousticClassifier(np.zeros(4), np.ones(3), np.zeros(4), 0.0)
    with pytest.raises(ValueError, match="finite"):
        AcousticClassifier(np.zeros(4), np.zeros(4), np.zeros(4), 0.0)


@pytest.mark.unit
def test_an_acoustic_loso_run_must_name_its_own_files(capsys):
    """No acoustic head or policy ships: a run that would write over the shipped prosodic
    model and policy (loso's defaults) is refused before any work."""
    from turn_detection.training import loso

    with pytest.raises(SystemExit):
        loso.main(["--data", "d", "--stt-cache", "c", "--witness", "acoustic", "--pauses", "p"])
    assert "needs --pauses, --out and --weights-out" in capsys.readouterr().err


@pytest.fixture(scope="module")
def encoder():
    return WhisperEncoder()


@pytest.mark.integration
def test_the_detector_reads_the_encoder_once_per_pause_as_training_does(encoder):
    """Streamed in 20 ms frames, each pause's features are those of the utterance so far,
    encoded whole: what `training/pauses.py` stores is what the session would read."""
    meta_path = next(p for p in sorted(CLIPS.glob("*-paused.json")) if p.stem.startswith("piper"))
    meta = json.loads(meta_path.read_text())
    audio, _ = read_wav(meta_path.with_suffix(".wav"))
    head = AcousticClassifier.extractor(encoder)
    det = EndOfTurnDetector.load(text_weights=None)
    stream = EndOfTurnDetector(det.vad, head, EndpointingPolicy(eval_silence_s=0.032, min_wait_s=60.0,
                                                                 max_wait_s=60.0)).stream()
    for i in range(0, len(audio), 320):
        stream.push(audio[i : i + 320])
    evs = stream.evaluations
    pause = meta["pauses"][0]
    assert any(pause[0] <= e.speech_end_s <= pause[0] + 0.15 for e in evs), [e.speech_end_s for e in evs]
    for e in evs:
        assert e.features.shape == (768,) and np.all(np.isfinite(e.features))
        assert 0.03 <= e.time_s - e.speech_end_s <= 0.07  # read at the first silent window
    # the pause's features again, from the audio pushed by then (whole 20 ms frames)
    e = next(e for e in evs if pause[0] <= e.speech_end_s <= pause[0] + 0.15)
    upto = audio[: int(np.ceil(round(e.time_s * 16000) / 320)) * 320]
    again = head.features(upto, round(e.speech_end_s * 16000))
    np.testing.assert_allclose(again, e.features, atol=1e-4)
