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


@pytest.mark.integration
def test_push_probability_is_push_window_without_the_model(vad):
    speech = piper_speech("Turn the radio down a little, please.")
    audio = with_silence(speech, 0.5, 1.0)
    n = len(audio) // 512
    probs = vad.probabilities(audio)[:n]
    by_model, by_prob = vad.stream(), vad.stream()
    ev_model = [by_model.push_window(audio[i * 512 : (i + 1) * 512]) for i in range(n)]
    ev_prob = [by_prob.push_probability(float(p)) for p in probs]
    assert [e for e in ev_model if e] == [e for e in ev_prob if e]
    assert [e.kind for e in ev_prob if e] == ["start", "end"]
    assert by_prob.windows == by_model.windows == n
    assert by_prob.last_probability == pytest.approx(by_model.last_probability)


@pytest.mark.unit
@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, "high"])
def test_push_probability_rejects_bad_values(bad):
    from turn_detection.vad import VADStream

    class _NoModel:
        def new_state(self):
            return None, None

    stream = VADStream(_NoModel(), VADConfig())
    with pytest.raises(ValueError):
        stream.push_probability(bad)
    assert stream.windows == 0
