"""The talk page's websocket protocol (PROTOCOL.md beside this file is the reference):
messages, their checks, and the close codes that end a connection.

Up: one JSON "hello" naming the audio format, then binary PCM16 mono 16 kHz frames.
Down: one JSON "hello" announcing the agent's audio rate, then binary PCM16 agent frames and
JSON events (pipeline/transport.py). Anything else closes that connection with a code below.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from parley.errors import ParleyError

PROTOCOL_VERSION = 1
INPUT_RATE = 16_000
ENCODING = "pcm_s16le"
FRAME_MS = 20

# Close codes. 1xxx are the RFC 6455 / IANA ones; 44xx mirror the HTTP status they resemble.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_TOO_BIG = 1009  # a frame over the size limit
CLOSE_INTERNAL = 1011  # the session failed to start or crashed
CLOSE_TRY_LATER = 1013  # the session cap is reached
CLOSE_BAD_MESSAGE = 4400  # malformed JSON, unknown type, audio before hello, odd-length audio...
CLOSE_UNAUTHORIZED = 4401  # token missing or wrong
CLOSE_FORBIDDEN_ORIGIN = 4403  # a page from another origin
CLOSE_HELLO_TIMEOUT = 4408  # no hello in time
CLOSE_SLOW_CLIENT = 4409  # the client stopped reading agent audio
CLOSE_AUDIO_FLOOD = 4429  # microphone audio far faster than real time
CLOSE_UNSUPPORTED_FORMAT = 4415  # a sample rate, encoding or channel count other than ours


class ProtocolError(ParleyError):
    """A client broke the protocol: its connection is closed with `code` and this message
    as the reason (others go on). Not retryable: the same message fails again."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason, retryable=False)
        self.code = code
        self.reason = close_reason(reason)


def close_reason(text: str) -> str:
    """A websocket close reason holds at most 123 bytes of UTF-8."""
    data = text.encode("utf-8")[:123]
    return data.decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class ClientHello:
    sample_rate: int
    encoding: str
    channels: int


def parse_text(text: str, max_bytes: int) -> dict[str, Any]:
    """A client's JSON message as a dict with a string "type"; ProtocolError otherwise."""
    if len(text.encode("utf-8")) > max_bytes:
        raise ProtocolError(CLOSE_TOO_BIG, f"text message over the limit of {max_bytes} bytes")
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(CLOSE_BAD_MESSAGE, f"malformed JSON: {e.msg} at {e.pos}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'a text message must be a JSON object with a string "type"')
    return msg


def parse_hello(msg: dict[str, Any]) -> ClientHello:
    """The client's hello: {"type": "hello", "sample_rate": 16000, "encoding": "pcm_s16le",
    "channels": 1} (encoding and channels may be left out; they default to these)."""
    if msg["type"] != "hello":
        raise ProtocolError(CLOSE_BAD_MESSAGE, f'expected "hello" first, got "{msg["type"][:40]}"')
    rate = msg.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise ProtocolError(CLOSE_BAD_MESSAGE, 'hello needs an integer "sample_rate"')
    encoding = msg.get("encoding", ENCODING)
    channels = msg.get("channels", 1)
    if rate != INPUT_RATE:
        raise ProtocolError(CLOSE_UNSUPPORTED_FORMAT,
                            f"sample_rate {rate} is not supported: send {INPUT_RATE} Hz (resample in the page)")
    if encoding != ENCODING:
        raise ProtocolError(CLOSE_UNSUPPORTED_FORMAT, f'encoding {str(encoding)[:40]!r} is not supported: send "{ENCODING}"')
    if channels != 1:
        raise ProtocolError(CLOSE_UNSUPPORTED_FORMAT, f"channels {str(channels)[:20]} is not supported: send mono")
    return ClientHello(rate, encoding, channels)


def decode_audio(data: bytes, max_bytes: int) -> np.ndarray:
    """A binary message as int16 [N] (little-endian on the wire, native in the array)."""
    if len(data) > max_bytes:
        raise ProtocolError(CLOSE_TOO_BIG, f"audio frame of {len(data)} bytes over the limit of {max_bytes}")
    if not data:
        raise ProtocolError(CLOSE_BAD_MESSAGE, "empty audio frame")
    if len(data) % 2:
        raise ProtocolError(CLOSE_BAD_MESSAGE, f"audio frame of {len(data)} bytes: PCM16 frames have an even length")
    return np.frombuffer(data, dtype="<i2").astype(np.int16)  # a writable copy the session may keep


def encode_audio(pcm: np.ndarray) -> bytes:
    return np.asarray(pcm, dtype=np.int16).astype("<i2", copy=False).tobytes()


def server_hello(output_rate: int, max_frame_bytes: int) -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL_VERSION, "sample_rate": output_rate, "encoding": ENCODING,
            "channels": 1, "input_sample_rate": INPUT_RATE, "frame_ms": FRAME_MS,
            "max_frame_bytes": max_frame_bytes}


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_event(event: dict[str, Any]) -> str:
    """An event as JSON text. NaN / inf (not JSON) become null; numpy scalars plain numbers."""
    return json.dumps(_finite(event), default=_jsonable, allow_nan=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
