"""Fault injection (pipeline.faults) in a live serverless session with timed fakes: every fault
kind of the LLM and the TTS becomes a typed error event, a spoken apology and a session that
answers the next turn; a stall ends at the stage's deadline, never in a hang."""

from __future__ import annotations

import time

import pytest

from llm_engine import FakeLLM
from parley.errors import StageOutputError, StageTimeoutError
from pipeline.config import SessionConfig
from pipeline.faults import Fault, FaultyLLM, FaultySynthesizer, InjectedFault
from pipeline.session import APOLOGY
from tests.speech import piper_speech, with_silence
from tests.test_pipeline_session import fake_components, fake_config
from tests.voice_harness import play, silence, start, wait_for
from tts import FakeSynthesizer

pytestmark = [pytest.mark.integration]
REPLY = "Here is a fine reply."


def _cfg(**kw) -> SessionConfig:
    from pipeline.budget import ResponsePolicy

    return fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False), **kw)


async def _fault_then_recover(cfg, llm, synth, *, expect: str) -> tuple[list[dict], float]:
    """Turn 1 meets the fault: an error event naming `expect` and the apology spoken. Turn 2 is
    answered. Returns the error events and the seconds from the final transcript to the error."""
    vs, run = await start(cfg, fake_components(cfg, llm, synth=synth))
    inner = synth.inner if isinstance(synth, FaultySynthesizer) else synth
    q = with_silence(piper_speech("What is the weather like today?"), 0.3, 0.2)
    try:
        await play(vs, run, q)
        assert await wait_for(run, lambda: run.of("error"), 6), run.events[-5:]
        t_err = next(t for t, e in run.events if e["type"] == "error")
        t_think = max(t for t, e in run.events if e["type"] == "transcript" and e["final"] and t <= t_err)
        assert await wait_for(run, lambda: APOLOGY.split()[0].rstrip(",") in " ".join(inner.texts), 5), inner.texts
        await play(vs, run, silence(1.0))
        await play(vs, run, q)
        assert await wait_for(run, lambda: any(e["text"] == REPLY for e in run.of("reply")), 8), run.events[-6:]
    finally:
        await vs.aclose()
        synth.close()
    errors = run.of("error")
    assert all(e["retryable"] for e in errors), errors
    assert any(expect in e["message"] for e in errors), errors
    return errors, t_err - t_think


def _synth() -> FakeSynthesizer:
    return FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02)


@pytest.mark.parametrize(("kind", "expect"), [
    ("raise", "InjectedFault"), ("empty", "empty reply"), ("malformed", "text delta of type bytes")])
async def test_an_llm_fault_is_apologized_for_and_the_next_turn_answered(kind, expect):
    llm = FaultyLLM(FakeLLM([REPLY], ttft_s=0.02), Fault(kind))
    await _fault_then_recover(_cfg(), llm, _synth(), expect=expect)
    assert all(s.closed for s in llm.faulted)  # the faulty request was closed, not leaked


async def test_an_llm_stall_ends_at_the_deadline_with_a_typed_error():
    llm = FaultyLLM(FakeLLM([REPLY], ttft_s=0.02), Fault("stall", stall_s=60.0))
    _, waited = await _fault_then_recover(_cfg(llm_deadline_s=0.5), llm, _synth(), expect="StageTimeoutError")
    assert 0.45 <= waited <= 1.5, waited  # the 0.5 s deadline, far from the 60 s stall


@pytest.mark.parametrize(("kind", "expect"), [
    ("raise", "injected failure"), ("malformed", ""), ("nan", "NaN")])
async def test_a_tts_fault_is_apologized_for_and_the_next_turn_answered(kind, expect):
    synth = FaultySynthesizer(_synth(), Fault(kind))
    await _fault_then_recover(_cfg(), FakeLLM([REPLY], ttft_s=0.02), synth, expect=expect)


async def test_a_tts_stall_ends_at_the_deadline_with_a_typed_error():
    synth = FaultySynthesizer(_synth(), Fault("stall", stall_s=60.0))
    t0 = time.monotonic()
    _, waited = await _fault_then_recover(_cfg(tts_deadline_s=0.6), FakeLLM([REPLY], ttft_s=0.02), synth,
                                          expect="StageTimeoutError")
    assert 0.55 <= waited <= 2.5, waited  # the 0.6 s deadline (+ the reply's first token)
    assert time.monotonic() - t0 < 30  # not the 60 s stall


async def test_empty_tts_audio_is_a_silent_reply_and_the_session_goes_on():
    synth = FaultySynthesizer(_synth(), Fault("empty"))
    llm = FakeLLM([REPLY], ttft_s=0.02)
    cfg = _cfg()
    vs, run = await start(cfg, fake_components(cfg, llm, synth=synth))
    q = with_silence(piper_speech("What is the weather like today?"), 0.3, 0.2)
    try:
        for _ in range(2):
            await play(vs, run, q)
            await play(vs, run, silence(1.5))
        assert await wait_for(run, lambda: len(run.of("budget")) >= 1, 4), run.events[-5:]
    finally:
        await vs.aclose()
    assert run.first_audible() is not None  # the second reply was heard


def test_fault_and_error_types():
    with pytest.raises(ValueError, match="fault kind"):
        Fault("explode")
    with pytest.raises(ValueError, match="calls"):
        Fault("raise", calls=())
    assert InjectedFault("x").retryable and StageOutputError("x").retryable
    err = StageTimeoutError("llm", 0.5, "token")
    assert err.retryable and isinstance(err, TimeoutError) and "0.5 s deadline" in str(err)
    with pytest.raises(ValueError, match="deadline"):
        SessionConfig(llm="fake", stt="fake", tts="fake", llm_deadline_s=0)
