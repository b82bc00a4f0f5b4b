import numpy as np
import pytest

from parley.audio import AudioFrame, Resampler, frames, resample, validate_audio
from parley.errors import AudioFormatError

pytestmark = pytest.mark.unit


def tone(freq=440.0, sr=16_000, seconds=1.0, amp=0.5):
    t = np.arange(int(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(x, sr):
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return np.fft.rfftfreq(len(x), 1 / sr)[spec.argmax()]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rejects_non_finite(bad):
    x = tone()
    x[100] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        validate_audio(x, 16_000)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.complex64, np.float16, object])
def test_rejects_unsupported_dtypes(dtype):
    with pytest.raises(AudioFormatError, match="dtype"):
        validate_audio(np.zeros(160, dtype=dtype), 16_000)


def test_rejects_empty_unless_allowed_and_bad_rates_and_shapes():
    with pytest.raises(ValueError, match="empty"):
        validate_audio(np.zeros(0, np.float32), 16_000)
    assert validate_audio(np.zeros(0, np.float32), 16_000, allow_empty=True).shape == (0,)
    for rate in (0, -16000, 1000, 10**6, 16000.0, True):
        with pytest.raises(ValueError, match="sample_rate"):
            validate_audio(tone(), rate)
    with pytest.raises(ValueError, match="shape"):
        validate_audio(np.zeros((2, 2, 2), np.float32), 16_000)
    with pytest.raises(ValueError, match="numpy array"):
        validate_audio([0.0, 0.1], 16_000)


def test_rejects_int_scaled_floats_but_clips_small_overs():
    with pytest.raises(ValueError, match="peak"):
        validate_audio(tone() * 32767, 16_000)
    out = validate_audio(tone(amp=1.2), 16_000)
    assert out.max() <= 1.0 and out.min() >= -1.0


def test_int16_and_int32_are_scaled_to_unit_range():
    x = tone(amp=0.5)
    i16 = np.round(x * 32767).astype(np.int16)
    i32 = i16.astype(np.int32) << 16
    np.testing.assert_allclose(validate_audio(i16, 16_000), x, atol=1e-4)
    np.testing.assert_allclose(validate_audio(i32, 16_000), x, atol=1e-4)


def test_stereo_44k_becomes_mono_16k_with_pitch_and_duration_kept():
    left, right = tone(440, 44_100, 1.0), tone(440, 44_100, 1.0)
    out = validate_audio(np.stack([left, right], axis=1), 44_100)
    assert out.dtype == np.float32 and out.ndim == 1
    assert len(out) == 16_000
    assert abs(peak_hz(out, 16_000) - 440) < 3


def test_resample_removes_content_above_the_new_nyquist():
    x = tone(7_000, 48_000) + tone(500, 48_000)
    y = resample(x, 48_000, 16_000)
    spec = np.abs(np.fft.rfft(y))
    f = np.fft.rfftfreq(len(y), 1 / 16_000)
    # 7 kHz is below 8 kHz Nyquist and must survive; nothing should alias elsewhere
    assert spec[np.abs(f - 7_000) < 20].max() > 0.3 * spec.max()
    assert spec[(f > 1_000) & (f < 6_500)].max() < 0.01 * spec.max()


@pytest.mark.parametrize("src,dst", [(48_000, 16_000), (16_000, 48_000), (22_050, 16_000), (44_100, 24_000)])
def test_streaming_resampler_matches_whole_buffer_and_has_no_seams(src, dst):
    x = tone(300, src, 0.5) + tone(1_100, src, 0.5, amp=0.2)
    whole = Resampler(src, dst).process(x)
    r = Resampler(src, dst)
    rng = np.random.default_rng(0)
    cuts = np.sort(rng.integers(0, len(x), 30))
    pieces = [r.process(c) for c in np.split(x, cuts)]
    streamed = np.concatenate(pieces)
    np.testing.assert_allclose(streamed, whole, atol=1e-5)  # chunking changes nothing
    assert abs(len(streamed) - len(x) * dst / src) <= 1
    ref = resample(x, src, dst)
    n = min(len(ref), len(streamed))
    lag = int(np.argmax(np.correlate(streamed[:2000], ref[:2000], "full")) - 1999)
    a, b = streamed[200 + lag : n - 200], ref[200 : n - 200 - lag]
    # integer-lag alignment leaves up to half a sample of fractional delay: corr >= 0.99
    assert np.corrcoef(a, b)[0, 1] > 0.99
    assert np.sqrt(np.mean(a**2)) == pytest.approx(np.sqrt(np.mean(b**2)), rel=0.02)


def test_frames_split_and_timestamps():
    x = tone(seconds=0.11)
    fs = list(frames(x, 16_000, 20, start_s=1.0))
    assert [len(f.samples) for f in fs] == [320] * 5 + [160]
    assert fs[1].timestamp_s == pytest.approx(1.02)
    assert fs[-1].end_s == pytest.approx(1.11)
    np.testing.assert_array_equal(np.concatenate([f.samples for f in fs]), x)


def test_audio_frame_validates():
    with pytest.raises(ValueError):
        AudioFrame(np.zeros(10, np.int16))
    with pytest.raises(ValueError):
        AudioFrame(np.zeros((10, 2), np.float32))
    assert AudioFrame(np.zeros(160, np.float32), 8_000).duration_s == pytest.approx(0.02)
