"""Shared primitives for every Parley stage: audio frames and conversion, WAV I/O, errors,
and the embedded model registry. This package imports none of the stage packages."""

from parley.audio import (
    AudioFrame,
    float_to_int16,
    frames,
    int16_to_float,
    resample,
    to_mono,
    validate_audio,
)
from parley.errors import (
    AudioFormatError,
    ModelCorruptError,
    ModelError,
    ModelNotFoundError,
    ParleyError,
)
from parley.wav import parse_wav, read_wav, write_wav

__all__ = [
    "AudioFormatError",
    "AudioFrame",
    "ModelCorruptError",
    "ModelError",
    "ModelNotFoundError",
    "ParleyError",
    "float_to_int16",
    "frames",
    "int16_to_float",
    "parse_wav",
    "read_wav",
    "resample",
    "to_mono",
    "validate_audio",
    "write_wav",
]
