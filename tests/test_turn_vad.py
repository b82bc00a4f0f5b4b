from __future__ import annotations

import numpy as np
import pytest

from parley.audio import frames
from tests.speech import espeak_available, espeak_speech, piper_speech, with_silence
from turn_detection import SileroVAD, VADConfig


@pytest.fixture(scope="module")
def vad():
    return SileroVAD()


@pytest.mark.integration
def test_probabilities_find_speech_in_piper_clip(vad):
    speech = piper_speech("The weather is lovely this morning.")
    audio = with_silence(speech, 0.5, 0.8)
    p = vad.probabilities(audio)
    assert len(p) == -(-len(audio) // 512)
    mid = slice(int(0.5 * 16000 / 512) + 3, int((0.5 * 16000 + len(speech)) / 512) - 3)
    assert np.mean(p[mid] > 0.5) > 0.8
    assert p[: int(0.4 * 16000 / 512)].max() < 0.3


@pytest.mark.integration
def test_no_speech_in_noise(vad):
    rng = np.random.default_rng(0)
    noise = (0.03 * rng.standard_normal(3 * 16000)).astype(np.float32)
    assert vad.probabilities(noise).max() < 0.5
    stream = vad.stream()
    events = [e for f in frames(noise) for e in stream.push(f.samples)]
    assert events == []


@pytest.mark.integration
@pytest.mark.skipif(not espeak_available(), reason="espeak-ng binary not installed")
def test_stream_events_bracket_the_speech(vad):
    speech = espeak_speech("Please turn on the kitchen lights.", voice="en-gb", wpm=170)
    audio = with_silence(speech, 0.6, 1.0)
    stream = vad.stream(VADConfig(min_silence_s=0.3, padding_s=0.0))
    events = []
    for f in frames(audio, frame_ms=37):  # odd frame length: windows span frames
        events += stream.push(f.samples)
    assert [e.kind for e in events] == ["start", "end"]
    start_s, end_s = 0.6, 0.6 + len(speech) / 16000
    assert abs(events[0].time_s - start_s) < 0.2
    assert abs(events[1].time_s - end_s) < 0.25


@pytest.mark.unit
def test_bad_input_and_config():
    with pytest.raises(ValueError):
        VADConfig(threshold=1.5)
    with pytest.raises(ValueError):
        VADConfig(min_silence_s=-1)


@pytest.mark.integration
def test_stream_rejects_nan(vad):
    with pytest.raises(ValueError):
        vad.stream().push(np.full(512, np.nan, dtype=np.float32))
