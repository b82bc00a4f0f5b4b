"""The talk server's security and limits: token, Origin, session cap, frame size, malformed
messages and wrong rates each close that one connection with a clear code; others go on."""

from __future__ import annotations

import asyncio
import contextlib
import json

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from pipeline.talk import TalkConfig, TalkServer
from pipeline.talk import protocol as P
from pipeline.talk.server import origin_allowed
from tests.fake_session import FakeSessionFactory
from tests.talk_client import HELLO, close_of, collect_until, open_client, send_speech, ws_url

TOKEN = "s3cret-token"


def speech_like(seconds: float = 1.0) -> np.ndarray:
    """A loud burst then silence: enough for the fake session's energy detector."""
    t = np.arange(int(seconds * 16_000)) / 16_000
    return np.concatenate([0.3 * np.sin(2 * np.pi * 220 * t), np.zeros(16_000)]).astype(np.float32)


async def expect_close(port: int, *, send=None, hello=HELLO, token=None, origin=None,
                       refused=False) -> tuple[int | None, str]:
    """Connect, send hello (unless None) and `send`, return the server's close code and
    reason. refused: the server must close without sending anything, its hello included."""
    ws = await connect(ws_url(port, token), origin=origin)
    with contextlib.suppress(ConnectionClosed):
        if hello is not None:
            await ws.send(json.dumps(hello))
        if send is not None:
            await ws.send(send)
    if refused:
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
    return await close_of(ws)


@pytest.mark.parametrize("message, code, words", [
    (b"\x01\x02\x03", P.CLOSE_BAD_MESSAGE, "even length"),
    (b"", P.CLOSE_BAD_MESSAGE, "empty"),
    (b"\0" * 6_402, P.CLOSE_TOO_BIG, "over the limit of 6400"),
    ("{not json", P.CLOSE_BAD_MESSAGE, "malformed JSON"),
    ("[1, 2]", P.CLOSE_BAD_MESSAGE, "JSON object"),
    ('{"type": "dance"}', P.CLOSE_BAD_MESSAGE, "unknown message type"),
    (json.dumps(HELLO), P.CLOSE_BAD_MESSAGE, "one session per connection"),
    (json.dumps({"type": "x", "pad": "a" * 5_000}), P.CLOSE_TOO_BIG, "over the limit"),
])
async def test_bad_messages_close_that_connection_and_no_other(message, code, words):
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0), factory) as server:
        good, _ = await open_client(server.port)
        got_code, reason = await expect_close(server.port, send=message)
        assert (got_code, words in reason) == (code, True), reason
        await send_speech(good, speech_like())  # the other session is undisturbed
        got = await collect_until(good, lambda g: bool(g.of("budget")))
        assert got.frames
        assert server.active_sessions == 1
        assert factory.sessions[1].aclose_calls == 1
        await good.close()


async def test_audio_far_faster_than_real_time_is_cut_off():
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0, max_audio_ahead_s=2.0), factory) as server:
        ws, _ = await open_client(server.port)
        await send_speech(ws, np.zeros(16_000, np.float32))  # 1 s at once: within the burst
        await asyncio.sleep(0.3)
        assert server.active_sessions == 1
        await send_speech(ws, np.zeros(3 * 16_000, np.float32))  # 3 s more at once: 1.6 s over
        code, reason = await close_of(ws)
        assert code == P.CLOSE_AUDIO_FLOOD and "faster than real time" in reason
    heard = sum(len(x) for x in factory.sessions[0].received) / 16_000
    assert 2.0 <= heard < 3.5  # 2 s ahead of the time it took, not all 4 s


async def test_a_real_time_client_is_not_cut_off_while_the_session_loads():
    # The first session loads the models (~15 s here) before any frame is read: a page
    # streaming in real time meanwhile is then read in one burst, and must not count as a flood.
    fakes = FakeSessionFactory()

    async def slow_factory(audio_sink, event_sink):
        await asyncio.sleep(1.0)
        return await fakes(audio_sink, event_sink)

    async with TalkServer(TalkConfig(port=0, max_audio_ahead_s=0.3), slow_factory) as server:
        ws, _ = await open_client(server.port)
        await send_speech(ws, speech_like(), pace_s=0.02)  # 2 s in real time
        got = await collect_until(ws, lambda g: bool(g.frames))
        await ws.close()
    assert got.frames and fakes.sessions[0].turn == 1


async def test_frames_far_over_the_limit_are_cut_by_the_transport():
    async with TalkServer(TalkConfig(port=0), FakeSessionFactory()) as server:
        code, _ = await expect_close(server.port, send=b"\0" * 100_000)
        assert code == P.CLOSE_TOO_BIG


@pytest.mark.parametrize("hello, code, words", [
    ({**HELLO, "sample_rate": 44_100}, P.CLOSE_UNSUPPORTED_FORMAT, "sample_rate 44100 is not supported"),
    ({**HELLO, "sample_rate": 48_000}, P.CLOSE_UNSUPPORTED_FORMAT, "send 16000 Hz"),
    ({**HELLO, "encoding": "opus"}, P.CLOSE_UNSUPPORTED_FORMAT, "encoding"),
    ({**HELLO, "channels": 2}, P.CLOSE_UNSUPPORTED_FORMAT, "mono"),
    ({"type": "hello"}, P.CLOSE_BAD_MESSAGE, "sample_rate"),
    ({**HELLO, "sample_rate": "16000"}, P.CLOSE_BAD_MESSAGE, "integer"),
    ({"type": "audio"}, P.CLOSE_BAD_MESSAGE, 'expected "hello" first'),
])
async def test_wrong_formats_in_hello_are_refused(hello, code, words):
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0), factory) as server:
        got_code, reason = await expect_close(server.port, hello=hello)
        assert got_code == code and words in reason, reason
        await asyncio.wait_for(server.wait_idle(), 5)
    assert factory.sessions == []  # refused before any session was made


async def test_audio_before_hello_and_a_silent_client_are_closed():
    async with TalkServer(TalkConfig(port=0, hello_timeout_s=0.3), FakeSessionFactory()) as server:
        code, reason = await expect_close(server.port, hello=None, send=b"\0\0" * 320)
        assert code == P.CLOSE_BAD_MESSAGE and "before hello" in reason
        code, reason = await expect_close(server.port, hello=None)
        assert code == P.CLOSE_HELLO_TIMEOUT and "no hello within 0.3 s" in reason


async def test_token_is_checked_on_connect():
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0, token=TOKEN), factory) as server:
        for token in (None, "wrong-token-123", TOKEN + "x"):
            code, reason = await expect_close(server.port, token=token, refused=True)
            assert code == P.CLOSE_UNAUTHORIZED and "token" in reason
        assert factory.sessions == []
        ws, hello = await open_client(server.port, token=TOKEN)
        assert hello["type"] == "hello"
        await send_speech(ws, speech_like())
        assert (await collect_until(ws, lambda g: bool(g.frames))).frames
        await ws.close()
        assert server.url().endswith(f"/#token={TOKEN}")  # the page reads it from the fragment


async def test_origin_is_checked():
    async with TalkServer(TalkConfig(port=0, allowed_origins=("https://talk.example",)), FakeSessionFactory()) as s:
        for origin in ("http://evil.example", "null", f"http://127.0.0.1:{s.port + 1}"):
            code, reason = await expect_close(s.port, origin=origin, refused=True)
            assert code == P.CLOSE_FORBIDDEN_ORIGIN and "origin" in reason, origin
        for origin in (f"http://127.0.0.1:{s.port}", "https://talk.example", None):
            ws, hello = await open_client(s.port, origin=origin)
            assert hello["type"] == "hello"
            await ws.close()


def test_origin_rules():
    local = TalkConfig()
    assert origin_allowed("http://localhost:8765", "localhost:8765", local)
    assert not origin_allowed("http://localhost:8765", "127.0.0.1:8765", local)  # not the page's origin
    # DNS rebinding: a foreign name pointed at 127.0.0.1 is same-origin by Host but refused
    assert not origin_allowed("http://rebind.example:8765", "rebind.example:8765", local)
    lan = TalkConfig(host="0.0.0.0", token=TOKEN)
    assert origin_allowed("http://192.168.1.20:8765", "192.168.1.20:8765", lan)
    assert not origin_allowed("http://192.168.1.20:8765", None, lan)
    assert not origin_allowed("file://", "192.168.1.20:8765", lan)


async def test_session_cap():
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0, max_sessions=2), factory) as server:
        a, _ = await open_client(server.port)
        b, _ = await open_client(server.port)
        code, reason = await expect_close(server.port, refused=True)
        assert code == P.CLOSE_TRY_LATER and "cap reached (2)" in reason
        await a.close()
        for _ in range(100):
            if server.active_sessions < 2:
                break
            await asyncio.sleep(0.02)
        c, hello = await open_client(server.port)  # a freed slot takes a new session
        assert hello["type"] == "hello" and server.active_sessions == 2
        await b.close()
        await c.close()
        await asyncio.wait_for(server.wait_idle(), 5)
    assert len(factory.sessions) == 3 and all(s.aclose_calls == 1 for s in factory.sessions)


@pytest.mark.parametrize("kw, words", [
    ({"host": "0.0.0.0"}, "pass --token"),
    ({"host": "192.168.1.5"}, "pass --token"),
    ({"host": "talk.example"}, "pass --token"),
    ({"token": "short"}, "at least 8"),
    ({"max_sessions": 0}, "max_sessions"),
    ({"max_frame_bytes": 641}, "even"),
    ({"output_rate": 12_345}, "output_rate"),
    ({"allowed_origins": ("talk.example",)}, "http(s)://"),
    ({"port": 70_000}, "port"),
])
def test_config_refuses(kw, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        TalkConfig(**kw)


def test_config_accepts_loopback_without_and_any_host_with_a_token():
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert TalkConfig(host=host).token is None
    assert TalkConfig(host="0.0.0.0", token=TOKEN).host == "0.0.0.0"
