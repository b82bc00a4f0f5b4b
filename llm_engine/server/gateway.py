"""The server's one door into the engine: admission (queue limit, draining), tokenization and
add_request off the event loop, and each request's deltas carried from the engine thread to
the loop. Every request leaves through Generation.close(), which aborts it in the engine if
it did not finish (client gone, handler cancelled, shutdown), so its KV blocks are freed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from llm_engine.outputs import RequestOutput
from llm_engine.server.metrics import ServerMetrics
from llm_engine.server.protocol import APIError, GenerationRequest, resolve_max_tokens


class Generation:
    """One request in the engine, seen from the event loop: iterate for text deltas; .output is
    the final RequestOutput once the iteration ends."""

    def __init__(self, gateway: Gateway, req: GenerationRequest, rid: str) -> None:
        self.gateway, self.req, self.request_id = gateway, req, rid
        self.loop = asyncio.get_running_loop()
        # Unbounded in type, bounded in fact: at most max_tokens deltas and one final.
        self.queue: asyncio.Queue[tuple[str, RequestOutput | None, float]] = asyncio.Queue()
        self.output: RequestOutput | None = None
        self.t_arrival = time.perf_counter()
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.added = False
        self.shutdown = False  # aborted by a shutdown that ran out of time

    def sink(self, delta: str, final: RequestOutput | None) -> None:  # engine thread (or abort's)
        t = time.perf_counter()
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (delta, final, t))

    async def __aiter__(self) -> AsyncIterator[str]:
        itl = self.gateway.metrics.itl
        while self.output is None:
            delta, final, t = await self.queue.get()
            if delta:
                if self.t_first is None:
                    self.t_first = t
                    self.gateway.metrics.ttft.observe(t - self.t_arrival)
                else:
                    itl.observe(t - self.t_last)
                self.t_last = t
                yield delta
            if final is not None:
                self.output = final
        if self.output.finish_reason == "error":  # the engine thread failed this step
            raise APIError(500, f"the engine failed: {getattr(self.output, 'error', None) or 'unknown error'}",
                           type="server_error", code="engine_error")
        if self.output.finish_reason == "abort":
            if self.shutdown:
                raise APIError(503, "the server shut down before this request finished",
                               type="server_error", code="shutting_down")
            raise APIError(500, "the request was aborted in the engine", type="server_error", code="aborted")

    def abort(self) -> None:
        if self.added and self.output is None:
            self.gateway.engine.abort(self.request_id)


class Gateway:
    def __init__(self, engine: Any, metrics: ServerMetrics, max_queue: int) -> None:
        self.engine, self.metrics, self.max_queue = engine, metrics, max_queue
        self.live: dict[str, Generation] = {}
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return len(self.live)

    def _admit(self, req: GenerationRequest) -> Generation:
        if self.draining:
            self.metrics.rejected.labels("shutting_down").inc()
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
        if len(self.live) >= self.max_queue:
            self.metrics.rejected.labels("queue_full").inc()
            raise APIError(429, f"the server's queue is full ({self.max_queue} requests in flight); retry later",
                           type="rate_limit_error", code="queue_full")
        prefix = "chatcmpl" if req.kind == "chat" else "cmpl"
        gen = Generation(self, req, f"{prefix}-{uuid.uuid4().hex}")
        self.live[gen.request_id] = gen
        self._idle.clear()
        self.metrics.in_flight.set(len(self.live))
        return gen

    def _add(self, gen: Generation) -> None:
        # In an executor thread: the chat template and tokenizer take milliseconds on a long
        # prompt, which would stall every other stream on the loop.
        req, engine = gen.req, self.engine
        if req.kind == "chat":
            try:
                ids = engine.encode_chat(list(req.messages))
            except ValueError as e:
                raise APIError(400, f"messages: {e}", param="messages") from e
        else:
            ids = engine.tokenizer.encode(req.prompt) if isinstance(req.prompt, str) else list(req.prompt)
        params = resolve_max_tokens(req, len(ids), engine.token_limit)
        try:
            engine.add_request(ids, params, gen.request_id, gen.sink)
        except ValueError as e:  # token ids out of the vocabulary, a prompt the engine refuses
            raise APIError(400, f"{'messages' if req.kind == 'chat' else 'prompt'}: {e}",
                           param="messages" if req.kind == "chat" else "prompt") from e
        gen.added = True
        if gen.shutdown:  # cut while it was being added
            engine.abort(gen.request_id)
        engine.ensure_worker()

    async def start(self, req: GenerationRequest) -> Generation:
        """Admit req (or raise 429/503) and hand it to the engine; the caller must close() it."""
        gen = self._admit(req)
        fut = gen.loop.run_in_executor(None, self._add, gen)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The client left while the prompt was being added: abort once the add lands.
            fut.add_done_callback(lambda _f: self.close(gen))
            raise
        except BaseException:
            self.close(gen)
            raise
        return gen

    def close(self, gen: Generation) -> None:
        """Abort gen in the engine if unfinished, record it and free its admission slot."""
        if self.live.pop(gen.request_id, None) is None:
            return
        gen.abort()
        self.metrics.in_flight.set(len(self.live))
        out = gen.output
        if out is not None:
            self.metrics.record_finish(out.finish_reason or "unknown", len(out.prompt_token_ids),
                                       len(out.token_ids), out.num_cached_tokens)
            if gen.t_last is not None:
                self.metrics.e2e.observe(gen.t_last - gen.t_arrival)
        elif gen.added:
            self.metrics.finished.labels("abort").inc()
        if not self.live:
            self._idle.set()

    async def drain(self, timeout_s: float) -> int:
        """Refuse new requests, let in-flight ones finish for up to timeout_s, then abort the
        rest (their streams end with a 503 error). Returns how many were aborted."""
        self.draining = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return 0
        except TimeoutError:
            return self.cut_all()

    def cut_all(self) -> int:
        """End every in-flight request now with a 503 error (shutdown past its patience)."""
        left = [g for g in self.live.values() if g.output is None]
        for gen in left:
            gen.shutdown = True
            gen.abort()
        return len(left)
