"""Helpers for the talk server tests: a server on a free port with a fake session, and a
websocket client that speaks the page's protocol."""

from __future__ import annotations

import asyncio
import contextlib
import json

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from parley.audio import float_to_int16

HELLO = {"type": "hello", "sample_rate": 16_000, "encoding": "pcm_s16le", "channels": 1}


def ws_url(port: int, token: str | None = None) -> str:
    return f"ws://127.0.0.1:{port}/ws" + (f"?token={token}" if token else "")


async def open_client(port: int, *, token: str | None = None, origin: str | None = None,
                      hello: dict | None = HELLO) -> tuple[ClientConnection, dict]:
    """Connect, read the server's hello, send ours (unless hello is None)."""
    ws = await connect(ws_url(port, token), origin=origin, max_size=2**20)
    first = json.loads(await asyncio.wait_for(ws.recv(), 5))
    if hello is not None:
        await ws.send(json.dumps(hello))
    return ws, first


async def send_speech(ws: ClientConnection, audio: np.ndarray, frame: int = 320, pace_s: float = 0.0) -> None:
    pcm = float_to_int16(audio)
    for i in range(0, len(pcm), frame):
        await ws.send(pcm[i : i + frame].astype("<i2").tobytes())
        if pace_s:
            await asyncio.sleep(pace_s)


async def close_of(ws: ClientConnection, wait_s: float = 5.0) -> tuple[int | None, str]:
    """Read until the server closes; its close code and reason."""
    with contextlib.suppress(ConnectionClosed):
        async with asyncio.timeout(wait_s):
            while True:
                await ws.recv()
    rcvd = ws.close_code, ws.close_reason
    return rcvd[0], rcvd[1] or ""


class Collected:
    """What the server sent on one connection: events by type and agent audio frames."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.frames: list[np.ndarray] = []

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]


async def collect_until(ws: ClientConnection, done, wait_s: float = 10.0) -> Collected:
    """Receive until done(collected) is true."""
    got = Collected()
    async with asyncio.timeout(wait_s):
        while not done(got):
            msg = await ws.recv()
            if isinstance(msg, bytes):
                got.frames.append(np.frombuffer(msg, dtype="<i2"))
            else:
                got.events.append(json.loads(msg))
    return got
