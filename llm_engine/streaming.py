"""The async streaming API: the engine steps in its worker thread; deltas cross to the event
loop through call_soon_threadsafe, so no model call ever runs on the loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from llm_engine.outputs import RequestOutput
from llm_engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from llm_engine.engine import LLMEngine


async def stream_chat(engine: LLMEngine, messages: list[dict[str, Any]], params: SamplingParams | None,
                      request_id: str | None) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, RequestOutput | None]] = asyncio.Queue()

    def sink(delta: str, final: RequestOutput | None) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (delta, final))

    ids = engine.encode_chat(messages)
    rid = engine.add_request(ids, params, request_id, sink)
    engine.ensure_worker()
    done = False
    try:
        while True:
            delta, final = await queue.get()
            if delta:
                yield delta
            if final is not None:
                done = True
                return
    finally:
        if not done:
            engine.abort(rid)  # the consumer stopped listening (barge-in): free the blocks now
