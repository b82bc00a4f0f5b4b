"""Running the application: `serve()` until SIGTERM/SIGINT (or a stop event), then a graceful
drain; `ServerThread` runs the same in a background thread (tests, benchmarks, embedding)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from llm_engine.server.app import GATEWAY, build_app
from llm_engine.server.config import ServerConfig

log = logging.getLogger("parley.serve")


async def serve(engine: Any, config: ServerConfig, *, stop: asyncio.Event | None = None,
                on_ready: Callable[[int], None] | None = None) -> int:
    """Serve until `stop` is set or, in the main thread, SIGTERM/SIGINT arrives; then refuse new
    requests (503 + Retry-After), give in-flight ones config.shutdown_timeout_s to finish, end
    the rest with an error event, close. Returns how many requests were cut short."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    app = build_app(engine, config)
    # handler_cancellation: a client that disconnects cancels its handler, whose cleanup
    # aborts the request in the engine (without it only a failed write would notice).
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    signals: list[signal.Signals] = []
    try:
        site = web.TCPSite(runner, config.host, config.port)
        await site.start()
        port = runner.addresses[0][1]
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
                signals.append(sig)
        log.info("serving %s on http://%s:%d", config.model_name, config.host, port)
        if on_ready is not None:
            on_ready(port)
        await stop.wait()
        log.info("shutting down: %d requests in flight", app[GATEWAY].in_flight)
        cut = await app[GATEWAY].drain(config.shutdown_timeout_s)
        await asyncio.sleep(0.05)  # let the cut streams write their error event
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
    return cut


class ServerThread:
    """`serve()` on its own event loop in a daemon thread: `start()` returns once listening."""

    def __init__(self, engine: Any, config: ServerConfig) -> None:
        self.engine, self.config = engine, config
        self.port: int | None = None
        self.cut: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="parley-serve", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"the server did not start within {timeout_s} s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()

            def ready(port: int) -> None:
                self.port = port
                self._ready.set()

            self.cut = await serve(self.engine, self.config, stop=self._stop, on_ready=ready)

        try:
            asyncio.run(main())
        except Exception as e:  # reported to start()'s caller, not lost in the thread
            self._error = e
            self._ready.set()

    def stop(self, timeout_s: float | None = None) -> None:
        """Graceful shutdown, as on SIGTERM; waits for the thread to end."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s if timeout_s is not None else self.config.shutdown_timeout_s + 10)
