import struct

import numpy as np
import pytest

from parley.errors import AudioFormatError
from parley.wav import read_wav, write_wav

pytestmark = pytest.mark.unit


def _sig(n=1000, channels=1):
    rng = np.random.default_rng(1)
    x = rng.uniform(-0.9, 0.9, size=(n, channels)).astype(np.float32)
    return x[:, 0] if channels == 1 else x


@pytest.mark.parametrize("channels", [1, 2])
def test_int16_roundtrip(tmp_path, channels):
    x = _sig(channels=channels)
    write_wav(tmp_path / "a.wav", x, 22_050)
    y, sr = read_wav(tmp_path / "a.wav")
    assert sr == 22_050 and y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=1 / 16_000)


def test_float32_roundtrip_is_exact(tmp_path):
    x = _sig()
    write_wav(tmp_path / "f.wav", x, 48_000, float32=True)
    y, sr = read_wav(tmp_path / "f.wav")
    assert sr == 48_000
    np.testing.assert_array_equal(y, x)


def test_reads_24_bit_pcm(tmp_path):
    vals = np.array([0, 1 << 22, -(1 << 22), (1 << 23) - 1, -(1 << 23)], dtype=np.int64)
    raw = b"".join(int(v & 0xFFFFFF).to_bytes(3, "little") for v in vals)
    fmt = struct.pack("<HHIIHH", 1, 1, 16_000, 48_000, 3, 24)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(raw)) + raw
    (tmp_path / "x.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    y, _ = read_wav(tmp_path / "x.wav")
    np.testing.assert_allclose(y, vals / float(1 << 23))


def test_corrupt_and_missing_files_raise_audio_format_error(tmp_path):
    (tmp_path / "bad.wav").write_bytes(b"not a wav at all")
    with pytest.raises(AudioFormatError, match="RIFF"):
        read_wav(tmp_path / "bad.wav")
    with pytest.raises(AudioFormatError, match="cannot read"):
        read_wav(tmp_path / "missing.wav")
    good = write_wav(tmp_path / "g.wav", _sig(), 16_000).read_bytes()
    (tmp_path / "trunc.wav").write_bytes(good[:30])
    with pytest.raises(AudioFormatError, match="missing fmt or data"):
        read_wav(tmp_path / "trunc.wav")
