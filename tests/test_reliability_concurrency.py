"""Concurrent sessions. Four serverless voice sessions share one engine (each its own Hearing,
transcriber and TTS streams; real Silero VAD, fake STT / detector / LLM / TTS, because the real
models on 2 shared cores cannot run four at once in real time): all answer, and no session's
words reach another's history. Then 16 talk-server clients against a cap of 8 real voice
sessions: the extra 8 are refused with a clear close code, the admitted 8 all answer."""

from __future__ import annotations

import asyncio
import re

import pytest
from websockets.asyncio.client import connect

from llm_engine import FakeLLM
from pipeline.components import load_components
from pipeline.session import session_factory
from pipeline.talk import TalkConfig, TalkServer
from pipeline.talk import protocol as P
from stt import FakeTranscriber
from tests.speech import piper_speech, with_silence
from tests.talk_client import close_of, collect_until, open_client, send_speech, ws_url
from tests.test_pipeline_session import fake_config
from tests.voice_harness import play, silence, start, wait_for
from tts import FakeSynthesizer
from turn_detection import FakeEndOfTurnDetector

pytestmark = [pytest.mark.integration]
NAMES = ("alpha", "bravo", "charlie", "delta")


def _echo(messages) -> str:
    """The reply names the user's last words, so a crossed history shows in the text."""
    return f"You asked about {messages[-1]['content'].split()[-1]}."


def _components(cfg, engine, name: str):
    return load_components(
        cfg, engine=engine, detector=FakeEndOfTurnDetector(silence_s=0.2),
        synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
        transcriber_factory=lambda: FakeTranscriber((f"tell me about {name}", f"more on {name}"),
                                                    words_per_s=6.0, final_delay_s=0.02))


async def test_four_sessions_share_one_engine_without_cross_talk():
    from pipeline.budget import ResponsePolicy

    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    engine = FakeLLM([_echo], ttft_s=0.05, token_s=0.01)
    sessions = [await start(cfg, _components(cfg, engine, name)) for name in NAMES]
    q = with_silence(piper_speech("Tell me about it."), 0.3, 0.2)

    async def converse(vs, run) -> None:
        for turn in range(2):
            await play(vs, run, q)
            assert await wait_for(run, lambda n=turn + 1: len(run.of("budget")) >= n, 6), run.events[-4:]
            await play(vs, run, silence(0.8))

    try:
        await asyncio.gather(*(converse(vs, run) for vs, run in sessions))
    finally:
        for vs, _ in sessions:
            await vs.aclose()
    for name, (_, run) in zip(NAMES, sessions, strict=True):
        replies = [e["text"] for e in run.of("reply")]
        assert replies == [f"You asked about {name}."] * 2, (name, replies)
        perceived = [r["perceived_ms"] for r in run.of("budget")]
        assert all(0 < p < 1500 for p in perceived), (name, perceived)
    assert len(engine.requests) == 8
    for messages in engine.requests:  # each request carries one session's words only
        words = set(re.findall(r"[a-z]+", " ".join(m["content"] for m in messages if m["role"] != "system")))
        assert len(words & set(NAMES)) == 1, messages
    second_turns = [m for m in engine.requests if sum(x["role"] == "user" for x in m) == 2]
    assert len(second_turns) == 4  # the second request holds the session's own first exchange


async def test_sixteen_clients_against_a_cap_of_eight_real_sessions():
    from pipeline.budget import ResponsePolicy

    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    comps = _components(cfg, FakeLLM([_echo], ttft_s=0.05, token_s=0.01), "echo")
    factory = session_factory(cfg, comps)
    async with TalkServer(TalkConfig(port=0, max_sessions=8), factory) as server:
        admitted = [await open_client(server.port) for _ in range(8)]
        assert all(hello["type"] == "hello" for _, hello in admitted)
        extra = [await connect(ws_url(server.port)) for _ in range(8)]  # refused before any hello
        closes = await asyncio.gather(*(close_of(ws) for ws in extra))
        speech = with_silence(piper_speech("Tell me about it."), 0.3, 0.6)

        async def one(ws):
            await send_speech(ws, speech, pace_s=0.02)
            return await collect_until(ws, lambda got: got.of("reply"), wait_s=20)

        got = await asyncio.gather(*(one(ws) for ws, _ in admitted))
        for ws, _ in admitted:
            await ws.close()
        await asyncio.wait_for(server.wait_idle(), 10)
    for code, reason in closes:
        assert code == P.CLOSE_TRY_LATER and "cap reached (8)" in reason, (code, reason)
    for g in got:
        assert g.of("reply")[0]["text"] == "You asked about echo.", g.events[-4:]
