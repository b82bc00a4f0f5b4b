"""The timed LLM fake: the engine's API, scripted replies, delays, abort, limits."""

from __future__ import annotations

import asyncio
import time

import pytest

from llm_engine import FakeLLM, SamplingParams

pytestmark = pytest.mark.unit
MSGS = [{"role": "user", "content": "What's the weather?"}]


async def _collect(agen):
    return [d async for d in agen]


def test_stream_yields_script_with_delays_and_cycles():
    llm = FakeLLM(["It is sunny today.", lambda m: f"You said: {m[-1]['content']}"], ttft_s=0.03, token_s=0.01)
    t0 = time.perf_counter()
    deltas = asyncio.run(_collect(llm.stream_chat(MSGS)))
    elapsed = time.perf_counter() - t0
    assert deltas == ["It", " is", " sunny", " today."]
    assert elapsed >= 0.03 + 3 * 0.01  # sleeps are lower bounds
    assert "".join(asyncio.run(_collect(llm.stream_chat(MSGS)))) == "You said: What's the weather?"
    assert list(llm.requests) == [MSGS, MSGS]


def test_abort_and_early_close_stop_the_stream():
    llm = FakeLLM(["one two three four five six"], ttft_s=0.0, token_s=0.01)

    async def run():
        got = []
        async for d in llm.stream_chat(MSGS, request_id="r1"):
            got.append(d)
            if len(got) == 2:
                assert llm.abort("r1") is True
        return got

    assert asyncio.run(run()) == ["one", " two"]
    assert llm.abort("r1") is False  # finished requests are forgotten

    async def close_early():
        agen = llm.stream_chat(MSGS, request_id="r2")
        first = await agen.__anext__()
        await agen.aclose()
        return first

    assert asyncio.run(close_early()) == "one" and llm.abort("r2") is False


def test_generate_and_chat_honour_limits_and_stops():
    llm = FakeLLM(["Hello there. How are you today?"], ttft_s=0.0, token_s=0.0)
    out = llm.chat([MSGS], SamplingParams(max_tokens=2))[0]
    assert out.text == "Hello there." and out.finish_reason == "length" and len(out.token_ids) == 2
    out = llm.generate(["hi"], SamplingParams(stop=("How",)))[0]
    assert out.text == "Hello there." and out.finish_reason == "stop"


def test_bad_input_is_rejected_like_the_engine():
    with pytest.raises(ValueError, match="delays"):
        FakeLLM(ttft_s=-1)
    llm = FakeLLM()
    with pytest.raises(ValueError, match="empty conversation"):
        asyncio.run(_collect(llm.stream_chat([])))
    with pytest.raises(ValueError, match="list of conversations"):
        llm.chat(MSGS)
    with pytest.raises(ValueError, match="non-empty"):
        llm.generate([])


def test_fake_has_the_engine_serving_surface():
    from llm_engine.streaming import ChatStream

    llm = FakeLLM(["One two three four."], ttft_s=0.0, token_s=0.005, block_size=2)
    history = [{"role": "user", "content": "a b c d e f g h"}]

    async def run():
        rid = llm.prefill(history)
        stream = llm.stream_chat([*history, {"role": "assistant", "content": "x"}], request_id="s")
        assert isinstance(stream, ChatStream) and stream.request_id == "s" and stream.output is None
        text = "".join([d async for d in stream])
        return rid, text, stream.output

    rid, text, out = asyncio.run(run())
    assert text == "One two three four." and out.finish_reason == "stop" and len(out.token_ids) == 4
    assert out.num_cached_tokens == 8 and "ttft_s" in out.metrics and llm.abort(rid) is False
    assert llm.num_free_blocks == llm.num_blocks

    got = []
    llm.add_request("hello", SamplingParams(max_tokens=2), request_id="r", sink=lambda d, f: got.append((d, f)))
    deadline = time.time() + 5
    while (not got or got[-1][1] is None) and time.time() < deadline:
        time.sleep(0.01)
    assert [d for d, _ in got[:-1]] == ["One", " two"] and got[-1][1].finish_reason == "length"

    async def barge_in():
        stream = llm.stream_chat(history, request_id="b")
        async for _ in stream:
            break  # leaving the loop aborts the request
        for _ in range(100):
            await asyncio.sleep(0.01)
            if llm.num_free_blocks == llm.num_blocks:
                return True
        return False

    assert asyncio.run(barge_in()) and llm.abort("b") is False
