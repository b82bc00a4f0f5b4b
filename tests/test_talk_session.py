"""The talk server driving the REAL voice session (pipeline.session.session_factory) with the
real engine: a spoken question over the websocket gets transcript and reply events and agent
audio; a client that vanishes mid-reply leaves no engine request behind (every KV block back
on the free list), no task and no thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from llm_engine import LLMEngine
from pipeline.budget import ResponsePolicy
from pipeline.components import load_components
from pipeline.config import SessionConfig
from pipeline.session import session_factory
from pipeline.talk import TalkConfig, TalkServer
from stt import FakeTranscriber
from tests.speech import piper_speech, with_silence
from tests.talk_client import collect_until, open_client, send_speech
from tts import FakeSynthesizer
from turn_detection import FakeEndOfTurnDetector

pytestmark = [pytest.mark.integration]
CONFIG = SessionConfig(stt="fake", tts="fake", max_tokens=120, preemptive=False,
                       response=ResponsePolicy(ack_enabled=False),
                       instructions="You are a storyteller. Tell long, detailed stories.")


@pytest.fixture(scope="module")
def engine():
    return LLMEngine.for_voice()


def components(engine):
    return load_components(CONFIG, engine=engine, detector=FakeEndOfTurnDetector(silence_s=0.2),
                           synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                           transcriber_factory=lambda: FakeTranscriber(("tell me a story about a dragon",),
                                                                       words_per_s=6.0, final_delay_s=0.02))


async def test_a_question_over_the_socket_gets_a_spoken_reply(engine):
    async with TalkServer(TalkConfig(port=0), session_factory(CONFIG, components(engine))) as server:
        ws, hello = await open_client(server.port)
        await send_speech(ws, with_silence(piper_speech("Tell me a story about a dragon."), 0.3, 0.6), pace_s=0.02)
        got = await collect_until(ws, lambda g: g.of("budget") and len(g.frames) > 10, wait_s=20)
        await ws.close()
        await asyncio.wait_for(server.wait_idle(), 10)
    assert any(e["final"] and "dragon" in e["text"] for e in got.of("transcript"))
    assert got.of("budget")[0]["perceived_ms"] > 0
    assert hello["sample_rate"] == CONFIG.output_rate


async def test_a_client_leaving_mid_reply_frees_the_engine_request(engine):
    idle_blocks = engine.num_free_blocks
    threads = {t.name for t in threading.enumerate()}
    async with TalkServer(TalkConfig(port=0), session_factory(CONFIG, components(engine))) as server:
        ws, _ = await open_client(server.port)
        await send_speech(ws, with_silence(piper_speech("Tell me a story about a dragon."), 0.3, 0.6), pace_s=0.02)
        await collect_until(ws, lambda g: len(g.frames) >= 3, wait_s=20)  # the reply is playing
        assert engine.num_free_blocks < idle_blocks  # its request holds KV blocks now
        ws.transport.abort()  # a crashed tab: no close frame
        await asyncio.wait_for(server.wait_idle(), 10)
        assert server.active_sessions == 0
    for _ in range(50):
        if engine.num_free_blocks == idle_blocks:
            break
        await asyncio.sleep(0.05)
    assert engine.num_free_blocks == idle_blocks == engine.num_blocks
    await asyncio.sleep(0.3)
    left = {t.name for t in threading.enumerate()} - threads - {"llm-engine"}
    assert not {n for n in left if n.startswith(("parley-hearing", "stt-worker", "tts-stream"))}, left
