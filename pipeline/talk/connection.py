"""`Connection`: one websocket, one voice session. Reads the page's hello and microphone
frames into the session, and sends the session's audio and events back through an Outbox."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import numpy as np
from aiohttp import WSMsgType, web

from parley.audio import Resampler, float_to_int16, int16_to_float
from parley.errors import AudioFormatError, ParleyError
from pipeline.talk import protocol as P
from pipeline.talk.config import TalkConfig
from pipeline.talk.outbox import SLOW, Outbox
from pipeline.transport import SessionFactory, SessionHandle

log = logging.getLogger(__name__)


class Connection:
    """Runs one accepted, admitted websocket until either side ends it. `run` returns only
    after the session's `aclose()` and the sender task are done, however the socket ended."""

    def __init__(self, ws: web.WebSocketResponse, config: TalkConfig, factory: SessionFactory) -> None:
        self._ws = ws
        self._config = config
        self._factory = factory
        self._outbox = Outbox(config.backlog_frames)
        self._resamplers: dict[int, Resampler] = {}
        self.handle: SessionHandle | None = None
        self.frames_in = 0
        self.frames_out = 0
        self._opened = time.monotonic()
        self._audio_s = 0.0  # microphone audio received so far

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_loop(), name="talk-sender")
        close: tuple[int, str] | None = None
        try:
            self._outbox.put_text(P.encode_event(P.server_hello(self._config.output_rate,
                                                                 self._config.max_frame_bytes)))
            await self._receive_hello()
            try:
                self.handle = await self._factory(self._on_audio, self._on_event)
            except ParleyError as e:
                raise P.ProtocolError(P.CLOSE_INTERNAL, f"session failed to start: {e}") from e
            await self._receive_loop(self.handle)
        except P.ProtocolError as e:
            log.info("talk: closing a connection: %s %s", e.code, e.reason)
            close = e.code, e.reason
        except Exception as e:  # a session bug ends this connection (1011), not the server
            log.exception("talk: session error")
            close = P.CLOSE_INTERNAL, f"internal error: {type(e).__name__}"
        finally:
            # The session ends first: the close handshake may wait on a client that never answers.
            self._outbox.close()
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            if self.handle is not None:
                await self.handle.aclose()
            log.info("talk: session ended (%d frames in, %d out)", self.frames_in, self.frames_out)
        if close is not None:
            await self._close(*close)

    async def _receive_hello(self) -> None:
        try:
            msg = await self._ws.receive(timeout=self._config.hello_timeout_s)
        except TimeoutError:
            raise P.ProtocolError(P.CLOSE_HELLO_TIMEOUT,
                                  f"no hello within {self._config.hello_timeout_s:g} s") from None
        if msg.type == WSMsgType.BINARY:
            raise P.ProtocolError(P.CLOSE_BAD_MESSAGE, "audio before hello: send the JSON hello first")
        if msg.type != WSMsgType.TEXT:
            raise P.ProtocolError(P.CLOSE_NORMAL, "closed before hello")
        P.parse_hello(P.parse_text(msg.data, self._config.max_text_bytes))

    async def _receive_loop(self, handle: SessionHandle) -> None:
        async for msg in self._ws:
            if msg.type == WSMsgType.BINARY:
                pcm = P.decode_audio(msg.data, self._config.max_frame_bytes)
                self._meter(len(pcm) / P.INPUT_RATE)
                try:
                    handle.push_audio(pcm, P.INPUT_RATE)
                except AudioFormatError as e:
                    raise P.ProtocolError(P.CLOSE_BAD_MESSAGE, f"bad audio frame: {e}") from e
                self.frames_in += 1
            elif msg.type == WSMsgType.TEXT:
                kind = P.parse_text(msg.data, self._config.max_text_bytes)["type"]
                if kind == "hello":
                    raise P.ProtocolError(P.CLOSE_BAD_MESSAGE, "one session per connection: hello sent twice")
                raise P.ProtocolError(P.CLOSE_BAD_MESSAGE, f'unknown message type "{kind[:40]}"')
            elif msg.type == WSMsgType.ERROR:  # the transport's own limit or a broken frame
                raise P.ProtocolError(P.CLOSE_BAD_MESSAGE, f"websocket error: {self._ws.exception()}")

    def _meter(self, seconds: float) -> None:
        self._audio_s += seconds
        limit = self._config.max_audio_ahead_s
        if self._audio_s - (time.monotonic() - self._opened) > limit:
            raise P.ProtocolError(P.CLOSE_AUDIO_FLOOD,
                                  f"audio faster than real time: over {limit:g} s ahead of the clock")

    async def _send_loop(self) -> None:
        while True:
            item = await self._outbox.get()
            if item is None:
                return
            if item is SLOW:
                await self._close(P.CLOSE_SLOW_CLIENT,
                                  f"client stopped reading: over {self._config.max_backlog_s:g} s of agent audio queued")
                return
            try:
                if isinstance(item, bytes):
                    await self._ws.send_bytes(item)
                    self.frames_out += 1
                else:
                    await self._ws.send_str(item)  # type: ignore[arg-type]
            except (ConnectionError, RuntimeError):  # the socket went away under us: run() ends too
                return

    async def _close(self, code: int, reason: str) -> None:
        if not self._ws.closed:
            await self._ws.close(code=code, message=P.close_reason(reason).encode("utf-8"))

    # -- the session's sinks: called on this event loop; they never block ------------------

    def _on_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        out_rate = self._config.output_rate
        if sample_rate != out_rate:
            rs = self._resamplers.get(sample_rate)
            if rs is None:
                rs = self._resamplers[sample_rate] = Resampler(sample_rate, out_rate)
            pcm = float_to_int16(rs.process(int16_to_float(pcm)))
        if len(pcm):
            self._outbox.put_audio(P.encode_audio(pcm))

    def _on_event(self, event: dict[str, Any]) -> None:
        self._outbox.put_text(P.encode_event(event), interrupt=event.get("type") == "interrupt")
