"""ChatStream: the async front end of one streaming request (LLMEngine.stream_chat, FakeLLM).

The engine steps in its own thread and calls the request's sink there; the sink hands each
(delta, final) to the event loop with call_soon_threadsafe, so the loop thread never runs a
model call and never waits for the engine lock: admission is a queue put (LLMEngine._admit).

Iteration ends with the final RequestOutput in `.output`. Leaving early aborts the request
(its KV blocks go back to the free list): `await stream.aclose()`, a cancelled consumer task,
or breaking out of `async for` (the loop's iterator is a separate async generator, dropped at
the break, whose finalizer aborts). Admission happens at construction when an event loop is
running in the calling thread, else at the first `__anext__`. A failure in the engine thread
ends the stream with ParleyError (the output's finish_reason is "error").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from llm_engine.outputs import RequestOutput
from parley.errors import ParleyError

Sink = Callable[[str, RequestOutput | None], None]


class ChatStream:
    """Async iterator of text deltas. start(sink) admits the request; abort(request_id) stops it."""

    def __init__(self, request_id: str, start: Callable[[Sink], object],
                 abort: Callable[[str], bool]) -> None:
        self.request_id = request_id
        self.output: RequestOutput | None = None  # the final output once the stream has ended
        self._start, self._abort = start, abort
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, RequestOutput | None]] | None = None
        self._done = False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._begin(loop)

    def _begin(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._queue = loop, asyncio.Queue()
        self._start(self._sink)

    def _sink(self, delta: str, final: RequestOutput | None) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
            self._loop.call_soon_threadsafe(self._deliver, delta, final)

    def _deliver(self, delta: str, final: RequestOutput | None) -> None:  # the loop thread
        if final is not None and self.output is None:
            self.output = final
        self._queue.put_nowait((delta, final))

    @property
    def finished(self) -> bool:
        return self._done

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[str]:
        try:
            while True:
                try:
                    delta = await self.__anext__()
                except StopAsyncIteration:
                    return
                yield delta
        finally:
            self._cancel()  # no-op when the stream ended; else the consumer left (barge-in)

    async def __anext__(self) -> str:
        if self._queue is None:
            self._begin(asyncio.get_running_loop())
        while not self._done:
            try:
                delta, final = await self._queue.get()
            except asyncio.CancelledError:
                self._cancel()
                raise
            if final is not None:
                self._done = True
                if final.finish_reason == "error":
                    raise ParleyError(f"request {self.request_id!r} failed in the engine: {final.error}")
            if delta:
                return delta
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop listening: aborts the request if it has not finished (frees its KV blocks)."""
        self._cancel()

    def _cancel(self) -> None:
        if not self._done:
            self._done = True
            if self._queue is not None:
                self._abort(self.request_id)
