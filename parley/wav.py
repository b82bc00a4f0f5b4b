"""WAV files: read PCM (8/16/24/32-bit) and IEEE float, mono or multichannel; write 16-bit or
float32. The stdlib `wave` module reads integer PCM only; browsers and DAWs also write float
and WAVE_FORMAT_EXTENSIBLE files, so we parse the RIFF chunks ourselves."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from parley.errors import AudioFormatError

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


def _chunks(data: bytes, path: Path):
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioFormatError(f"{path}: not a RIFF/WAVE file")
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        yield cid, data[pos + 8 : pos + 8 + size]
        pos += 8 + size + (size & 1)


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Returns (samples, sample_rate): float32 in [-1, 1], [N] for mono, [N, C] otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AudioFormatError(f"{path}: cannot read ({e.strerror})") from e
    return parse_wav(data, str(path))


def parse_wav(data: bytes, source: str = "<bytes>") -> tuple[np.ndarray, int]:
    """`read_wav` on bytes in memory. Streamed WAVs (a program's stdout, whose header holds
    placeholder sizes such as 0x7FFFFFFF) parse too: a chunk runs at most to the data's end."""
    path = source
    fmt = body = None
    for cid, chunk in _chunks(data, path):
        if cid == b"fmt ":
            fmt = chunk
        elif cid == b"data":
            body = chunk
    if fmt is None or body is None or len(fmt) < 16:
        raise AudioFormatError(f"{path}: missing fmt or data chunk")
    tag, channels, rate, _, align, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack("<H", fmt[24:26])[0]
    if channels < 1 or align < 1:
        raise AudioFormatError(f"{path}: invalid header ({channels} channels, block align {align})")
    n = len(body) // align
    body = body[: n * align]
    if tag == _PCM and bits == 8:
        x = (np.frombuffer(body, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == _PCM and bits == 16:
        x = np.frombuffer(body, "<i2").astype(np.float32) / 32768.0
    elif tag == _PCM and bits == 24:
        b = np.frombuffer(body, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif tag == _PCM and bits == 32:
        x = (np.frombuffer(body, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    elif tag == _FLOAT and bits in (32, 64):
        x = np.frombuffer(body, "<f4" if bits == 32 else "<f8").astype(np.float32)
    else:
        raise AudioFormatError(f"{path}: unsupported WAV format (tag {tag}, {bits} bits)")
    if channels > 1:
        x = x.reshape(-1, channels)
    return np.ascontiguousarray(x), int(rate)


def write_wav(path: str | Path, samples: np.ndarray, sample_rate: int, *, float32: bool = False) -> Path:
    """Write [N] or [N, C] audio (float in [-1, 1], or int16) as 16-bit PCM or float32."""
    path = Path(path)
    x = np.asarray(samples)
    if x.ndim not in (1, 2):
        raise AudioFormatError(f"audio must be [N] or [N, channels], got shape {x.shape}")
    channels = 1 if x.ndim == 1 else x.shape[1]
    if float32:
        body = np.clip(x.astype(np.float32), -1.0, 1.0).astype("<f4").tobytes()
        tag, bits = _FLOAT, 32
    else:
        if x.dtype != np.int16:
            x = np.round(np.clip(x.astype(np.float32), -1.0, 1.0) * 32767.0).astype(np.int16)
        body = x.astype("<i2").tobytes()
        tag, bits = _PCM, 16
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, int(sample_rate), int(sample_rate) * align, align, bits)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    return path
