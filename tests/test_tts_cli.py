"""`parley say`, the backends' public surface and the timed fake."""

from __future__ import annotations

import numpy as np
import pytest

from parley.errors import ModelNotFoundError
from parley.wav import read_wav
from pipeline.cli import main
from tts import EspeakSynthesizer, FakeSynthesizer, PiperSynthesizer, create_synthesizer
from tts.espeak_synthesizer import _parse_stream_wav
from tts.synthesizer import SynthesisError


@pytest.mark.integration
def test_say_writes_a_wav_at_the_requested_rate_and_prints_chunk_timings(tmp_path, capsys):
    out = tmp_path / "out.wav"
    assert main(["say", "Sure, the train leaves at 7:30. Bye!", "-o", str(out), "--rate", "16000",
                 "--backend", "espeak", "--stream", "--tps", "200"]) == 0
    audio, rate = read_wav(out)
    assert rate == 16_000 and audio.ndim == 1 and 1.0 < len(audio) / rate < 6.0
    assert np.abs(audio).max() > 0.05
    printed = capsys.readouterr().out
    assert "Sure," in printed and "first audio frame" in printed
    rows = [ln.split(None, 5) for ln in printed.splitlines() if ln.strip()[:1].isdigit()]
    # a row per chunk (three, or four when the keep-up cut the sentence on a busy host)
    assert [int(r[0]) for r in rows] == list(range(len(rows))) and len(rows) >= 3
    assert " ".join(r[5] for r in rows) == "Sure, the train leaves at 7:30. Bye!" and rows[0][5] == "Sure,"


@pytest.mark.integration
def test_piper_default_voice_synthesizes_at_22khz():
    synth = PiperSynthesizer.default(threads=1)
    result = synth.synthesize("Dr. Smith paid $5.20.")
    assert synth.sample_rate == 22_050 and result.text.startswith("Doctor Smith paid five dollars")
    assert result.metrics.audio_s > 1.0 and result.metrics.audio_s < 4.0 and result.metrics.rtf > 0
    assert synth.stats.calls == 1
    assert len(synth.synthesize("   ").audio) == 0


@pytest.mark.unit
def test_fake_synthesizer_follows_its_configured_timing():
    synth = FakeSynthesizer(first_audio_delay_s=0.05, rtf=0.5, seconds_per_char=0.01, tone_hz=None)
    result = synth.synthesize("x" * 40)  # 0.4 s of silence
    assert result.metrics.audio_s == pytest.approx(0.4)
    assert result.metrics.seconds >= 0.05 + 0.5 * 0.4
    assert not result.audio.any()
    stream = synth.stream().say("Hello, world.")
    assert len(list(stream)) > 0 and stream.metrics.first_frame_s >= 0.05


@pytest.mark.unit
def test_espeak_wav_parsing_and_errors():
    header = b"RIFF\xff\xff\xff\x7fWAVEfmt " + (16).to_bytes(4, "little")
    fmt = (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + (22050).to_bytes(4, "little")
    fmt += (44100).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    body = np.array([0, 16384, -16384], dtype="<i2").tobytes()
    audio, rate = _parse_stream_wav(header + fmt + b"data\xff\xff\xff\x7f" + body)
    assert rate == 22050 and audio.tolist() == [0.0, 0.5, -0.5]
    with pytest.raises(SynthesisError):
        _parse_stream_wav(b"not a wav")
    with pytest.raises(ModelNotFoundError):
        EspeakSynthesizer(binary="no-such-espeak-binary")
    with pytest.raises(ValueError):
        create_synthesizer("festival")
    with pytest.raises(TypeError):
        FakeSynthesizer().synthesize(None)
