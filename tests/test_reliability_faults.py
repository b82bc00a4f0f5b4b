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


# -- STT ------------------------------------------------------------------------------------


def _stt_components(cfg, fault: Fault, *, words_per_s: float = 6.0):
    from pipeline.components import load_components
    from pipeline.faults import FaultyTranscriber
    from stt import FakeTranscriber
    from turn_detection import FakeEndOfTurnDetector

    made: list = []

    def factory():  # the first transcriber is faulty; one made after a failure is not
        t = FakeTranscriber(("what is the weather like today",), words_per_s=words_per_s, final_delay_s=0.02)
        made.append(t if made else FaultyTranscriber(t, fault))
        return made[-1]

    comps = load_components(cfg, engine=FakeLLM([REPLY], ttft_s=0.02), detector=FakeEndOfTurnDetector(silence_s=0.2),
                            synthesizer=_synth(), transcriber_factory=factory)
    return comps, made


async def _two_turns(cfg, comps):
    vs, run = await start(cfg, comps)
    q = with_silence(piper_speech("What is the weather like today?"), 0.3, 0.2)
    try:
        await play(vs, run, q)
        await wait_for(run, lambda: run.of("reply"), 4, vs)
        await play(vs, run, silence(1.0))
        n = len(run.of("reply"))
        await play(vs, run, q)
        assert await wait_for(run, lambda: len(run.of("reply")) > n, 6, vs), run.events[-6:]
    finally:
        await vs.aclose()
    return run


def _apologized(comps) -> bool:
    return APOLOGY.split("?")[0].split(". ")[-1] in " ".join(comps.synthesizer.texts)


@pytest.mark.parametrize(("kind", "expect"), [("raise", "stt: injected failure"),
                                              ("malformed", "a transcript event of type object")])
async def test_an_stt_failure_is_apologized_for_and_the_next_turn_answered(kind, expect):
    """A push that raises (a dead worker) gets the transcriber replaced; garbage from poll is
    a typed error. Either way the next question is answered."""
    cfg = _cfg()
    comps, made = _stt_components(cfg, Fault(kind, calls=(20,)))  # 0.4 s into the first question
    run = await _two_turns(cfg, comps)
    errors = run.of("error")
    assert errors and all(e["retryable"] for e in errors), run.events[-8:]
    assert any(expect in e["message"] for e in errors), errors
    assert _apologized(comps)
    assert len(made) == (2 if kind == "raise" else 1)


async def test_a_stalled_final_is_answered_from_the_interim_words_at_the_deadline(caplog):
    cfg = _cfg(stt_deadline_s=0.5)
    comps, made = _stt_components(cfg, Fault("stall", calls=(0,), stall_s=60.0))
    with caplog.at_level("WARNING", logger="parley.hearing"):
        run = await _two_turns(cfg, comps)
    finals = [(t, e) for t, e in run.events if e["type"] == "transcript" and e["final"]]
    assert [e["text"] for _, e in finals][:2] == ["what is the weather like today"] * 2, finals
    assert any("stt: no final transcript within its 0.5 s deadline" in r.getMessage() for r in caplog.records)
    assert not run.of("error") and not _apologized(comps)  # answered, not apologized
    # the first final came at the deadline after the last interim, not after the 60 s stall
    t_last_interim = max(t for t, e in run.events if e["type"] == "transcript" and not e["final"] and t < finals[0][0])
    assert 0.5 <= finals[0][0] - t_last_interim <= 2.5, finals[0][0] - t_last_interim
    assert made[0]._stalled == []  # the stalled flush was cancelled by the reset


async def test_a_stalled_final_with_no_words_heard_is_a_typed_error_and_an_apology():
    cfg = _cfg(stt_deadline_s=0.5)
    # no interim words before the end of the turn: nothing to answer from
    comps, _ = _stt_components(cfg, Fault("stall", calls=(0,), stall_s=60.0), words_per_s=0.01)
    run = await _two_turns(cfg, comps)
    errors = run.of("error")
    assert any("stt: no final transcript within its 0.5 s deadline" in e["message"] for e in errors), errors
    assert _apologized(comps)
    assert run.of("reply")[-1]["text"] == REPLY  # the second turn was answered


def test_a_late_final_after_the_deadline_is_dropped():
    """The timeout and the final race on two threads: exactly one outcome per flush."""
    from concurrent.futures import Future

    from pipeline.hearing import Hearing
    from stt import FakeTranscriber, TranscriptEvent
    from turn_detection import FakeEndOfTurnDetector

    class Slow(FakeTranscriber):
        def flush_future(self) -> Future:
            self.pending: Future = Future()
            return self.pending

    clock = [0.0]
    h = Hearing(_VAD(), Slow(), FakeEndOfTurnDetector(), final_deadline_s=0.5, clock=lambda: clock[0])
    seen: list = []
    h._emit = seen.append
    h._words = "half a sentence"
    h._flush(0)
    clock[0] = 0.6
    h._check_final_deadline()
    assert [(e.kind, e.text) for e in seen] == [("final", "half a sentence")]
    h.transcriber.pending.set_result(TranscriptEvent("final", "late", "late", (), 1.0, 0.1, 0.0, 0))
    assert len(seen) == 1  # the late final is dropped: one outcome per flush
    with pytest.raises(ValueError, match="final_deadline_s"):
        Hearing(_VAD(), Slow(), FakeEndOfTurnDetector(), final_deadline_s=0)


def test_during_the_flush_only_a_preflight_of_the_turn_still_goes_out():
    """The turn ended before its pause decode's words came: its preflight still goes out (a
    reply can start on it before the final), for the turn being flushed; its interims, and
    the detector's words, are superseded by the final."""
    from concurrent.futures import Future

    from pipeline.hearing import Hearing
    from stt import FakeTranscriber, TranscriptEvent
    from turn_detection import FakeEndOfTurnDetector

    class Slow(FakeTranscriber):
        def flush_future(self) -> Future:
            self.pending: Future = Future()
            return self.pending

    h = Hearing(_VAD(), Slow(), FakeEndOfTurnDetector(), final_deadline_s=5.0, clock=lambda: 1.0)
    seen: list = []
    h._emit = seen.append
    h._turn = 4
    h._flush(3)
    late = [TranscriptEvent(kind, text, text, (), 1.0, 0.1, 0.2, 0)
            for kind, text in [("interim", "turn the"), ("preflight", "turn the lights off")]]
    h._transcripts(late)
    assert [(e.kind, e.text, e.turn) for e in seen] == [("preflight", "turn the lights off", 3)]
    assert h._words == ""  # nothing new for the detector or the fallback
    h.transcriber.pending.set_result(TranscriptEvent("final", "turn the lights off.", "", (), 1.0, 0.1, 0.2, 0))
    h._transcripts(late)  # not flushing any more: they are words of the new turn
    assert [(e.kind, e.turn) for e in seen[1:]] == [("final", 3), ("interim", 4), ("preflight", 4)]


class _VAD:  # the Hearing's Silero, never run in these tests
    def stream(self, config):
        from turn_detection.vad import VADStream

        return VADStream(self, config)

    def new_state(self):
        return None, None
