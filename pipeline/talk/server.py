"""`TalkServer`: the page and its websocket on aiohttp. Admission (Origin, token, session
cap) happens here; each admitted socket is then one `Connection` with one voice session."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from importlib import resources
from urllib.parse import urlsplit

from aiohttp import web

from pipeline.talk import protocol as P
from pipeline.talk.config import TalkConfig, is_loopback
from pipeline.talk.connection import Connection
from pipeline.transport import SessionFactory

log = logging.getLogger(__name__)

# path -> (file beside this module, content type). A fixed list: nothing else is served.
PAGE_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/budget-chart.js": ("budget-chart.js", "text/javascript; charset=utf-8"),
    "/capture-worklet.js": ("capture-worklet.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def origin_allowed(origin: str | None, host_header: str | None, config: TalkConfig) -> bool:
    """A browser always sends Origin on a websocket; a page may connect only from the origin
    it was served from (or one listed in config.allowed_origins). On a loopback bind the name
    must be a loopback one too: a foreign name re-pointed at 127.0.0.1 (DNS rebinding) would
    otherwise pass as same-origin. No Origin at all is a non-browser client (the token, when
    set, still applies)."""
    if origin is None:
        return True
    if origin in config.allowed_origins:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not host_header:
        return False
    if parts.netloc.lower() != host_header.lower():
        return False
    return not is_loopback(config.host) or is_loopback(parts.hostname or "")


def token_ok(given: str | None, config: TalkConfig) -> bool:
    if config.token is None:
        return True
    return given is not None and hmac.compare_digest(given.encode("utf-8"), config.token.encode("utf-8"))


class TalkServer:
    """`async with TalkServer(config, factory) as server:` serves until the block ends; or
    `await start()` / `await stop()`. `stop()` closes every socket (1001) and returns once
    each session's aclose() has run."""

    def __init__(self, config: TalkConfig, factory: SessionFactory) -> None:
        self.config = config
        self._factory = factory
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._reserved = 0  # admitted connections (each holds one session slot)
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the talk server is not started")
        return self._port

    @property
    def active_sessions(self) -> int:
        return self._reserved

    def url(self, host: str | None = None) -> str:
        """The page's address; the token rides in the fragment, which browsers never send."""
        h = host or ("127.0.0.1" if self.config.host in ("0.0.0.0", "::") else self.config.host)
        h = f"[{h}]" if ":" in h else h
        fragment = f"#token={self.config.token}" if self.config.token else ""
        return f"http://{h}:{self.port}/{fragment}"

    async def start(self) -> None:
        self._stopping = False
        app = web.Application()
        for path in PAGE_FILES:
            app.router.add_get(path, self._page)
        app.router.add_get("/ws", self._websocket)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])  # the real one when config.port is 0

    async def stop(self) -> None:
        self._stopping = True  # a socket arriving from here on is turned away, not left open
        for ws in list(self._sockets):
            await ws.close(code=P.CLOSE_GOING_AWAY, message=b"server shutting down")
        await self._idle.wait()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_idle(self) -> None:
        """Returns once no connection is being served (each one's session closed)."""
        await self._idle.wait()

    async def __aenter__(self) -> TalkServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def _page(self, request: web.Request) -> web.Response:
        name, ctype = PAGE_FILES[request.path]
        body = resources.files("pipeline.talk").joinpath(name).read_bytes()
        return web.Response(body=body, headers={**_HEADERS, "Content-Type": ctype})

    def _admit(self, request: web.Request) -> None:
        if self._stopping:
            raise P.ProtocolError(P.CLOSE_GOING_AWAY, "server shutting down")
        if not origin_allowed(request.headers.get("Origin"), request.headers.get("Host"), self.config):
            raise P.ProtocolError(P.CLOSE_FORBIDDEN_ORIGIN, "origin not allowed: open the page from this server")
        if not token_ok(request.query.get("token"), self.config):
            raise P.ProtocolError(P.CLOSE_UNAUTHORIZED, "missing or wrong token")
        if self._reserved >= self.config.max_sessions:
            raise P.ProtocolError(P.CLOSE_TRY_LATER,
                                  f"session cap reached ({self.config.max_sessions}): try again later")

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        cfg = self.config
        # The transport's own cap sits above ours, so an oversized frame reaches our check
        # and gets a reason; only frames beyond twice it are cut by aiohttp (1009, no reason).
        # A close handshake waits at most 2 s for a client that does not answer it.
        ws = web.WebSocketResponse(max_msg_size=2 * max(cfg.max_frame_bytes, cfg.max_text_bytes),
                                   heartbeat=cfg.heartbeat_s, compress=False, timeout=2.0)
        await ws.prepare(request)
        try:
            self._admit(request)
        except P.ProtocolError as e:
            await ws.close(code=e.code, message=e.reason.encode("utf-8"))
            return ws
        self._reserved += 1
        self._idle.clear()
        self._sockets.add(ws)
        try:
            await Connection(ws, cfg, self._factory).run()
        finally:
            self._sockets.discard(ws)
            self._reserved -= 1
            if not self._reserved:
                self._idle.set()
        return ws


async def serve(config: TalkConfig, factory: SessionFactory,
                on_ready: Callable[[TalkServer], None] | None = None) -> None:
    """Serve until cancelled (Ctrl-C in `parley talk`), then close every session."""
    server = TalkServer(config, factory)
    await server.start()
    try:
        if on_ready is not None:
            on_ready(server)
        await asyncio.Event().wait()
    finally:
        await server.stop()
