"""The voice session end to end with timed fakes (real Silero, fake STT / detector / LLM /
TTS with deterministic delays): the budget, acknowledgements, interruptions, failures, custom
LLMs and bad input at the session's edges. Real-time replay: a few seconds per test."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from llm_engine import FakeLLM
from parley.errors import AudioFormatError
from pipeline.budget import ResponsePolicy
from pipeline.components import load_components
from pipeline.config import SessionConfig
from pipeline.plugins.llm import ParleyLLM
from stt import FakeTranscriber
from tests.speech import piper_speech, with_silence
from tests.voice_harness import play, silence, start, wait_for
from tts import FakeSynthesizer
from turn_detection import FakeEndOfTurnDetector

pytestmark = [pytest.mark.integration]
QUESTION = "What is the weather like today?"
WORDS = ("what is the weather like today",)


def fake_components(config: SessionConfig, llm: FakeLLM, *, detector_silence_s: float = 0.2,
                    synth: FakeSynthesizer | None = None):
    return load_components(config, engine=llm, detector=FakeEndOfTurnDetector(silence_s=detector_silence_s),
                           synthesizer=synth or FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                           transcriber_factory=fake_transcriber)


def fake_transcriber() -> FakeTranscriber:
    return FakeTranscriber(WORDS, words_per_s=6.0, final_delay_s=0.02)


def fake_config(**kw) -> SessionConfig:
    return SessionConfig(llm="fake", stt="fake", tts="fake", **kw)


async def one_turn(config, components, audio=None, wait_s: float = 3.0):
    vs, run = await start(config, components)
    try:
        await play(vs, run, audio if audio is not None else with_silence(piper_speech(QUESTION), 0.3, 0.2))
        await wait_for(run, lambda: run.of("budget"), wait_s)
        await asyncio.sleep(0.3)
    finally:
        await vs.aclose()
    return vs, run


async def test_budget_marks_the_late_stage_and_the_loop_adds_no_endpointing_wait():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    llm = FakeLLM(["It is sunny and warm."], ttft_s=0.3, token_s=0.01)
    vs, run = await start(cfg, fake_components(cfg, llm))
    metrics = []
    vs.session.on("metrics_collected", lambda ev: metrics.append(ev.metrics))
    try:
        await play(vs, run, with_silence(piper_speech(QUESTION), 0.3, 0.2))
        await wait_for(run, lambda: run.of("budget"), 3.0)
        await asyncio.sleep(0.3)
    finally:
        await vs.aclose()
    stt_usage = [m for m in metrics if type(m).__name__ == "STTMetrics"]
    assert stt_usage and stt_usage[0].audio_duration > 1.5  # the usage event: audio heard this turn
    report = run.of("budget")[0]
    stages = {s["name"]: s for s in report["stages"]}
    assert all(s["ms"] is not None for s in stages.values()), stages
    assert report["overruns"][:1] == ["first_token"], report["overruns"]  # 300 ms against 60
    assert 280 <= stages["first_token"]["ms"] <= 420
    assert not stages["first_audio"]["overrun"] and not stages["transcript"]["overrun"], stages
    marks = report["marks"]
    # livekit adds no endpointing delay of its own: the request follows the final at once
    assert marks["llm_request"] - marks["final_transcript"] < 0.05, marks
    assert report["perceived_ms"] == pytest.approx(1000 * marks["output_first_frame"], abs=1)


async def test_after_a_reply_the_next_turns_history_is_prefilled():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    llm = FakeLLM(["It is sunny and warm."], ttft_s=0.02)
    await one_turn(cfg, fake_components(cfg, llm))
    # the request, the reply, then an empty user turn: the history the next request starts with
    after = [p for p in llm.prefills if p[-2:-1] == [{"role": "assistant", "content": "It is sunny and warm."}]]
    assert after and after[-1][:-2] == list(llm.requests)[-1], list(llm.prefills)
    assert after[-1][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize("preemptive", [False, True])
async def test_the_words_are_prefilled_ahead_at_the_preflight_only_without_a_preemptive_reply(preemptive):
    # a preemptive reply is asked at the preflight: a prefill ahead of the same words, sent
    # just before it, would hold it for a step computing the same tokens
    cfg = fake_config(preemptive=preemptive, response=ResponsePolicy(ack_enabled=False))
    llm = FakeLLM(["It is sunny and warm."], ttft_s=0.02)
    four = ("what is the weather",)  # PrefillAhead's least: 4 words, so only the preflight has them all
    comps = load_components(cfg, engine=llm, detector=FakeEndOfTurnDetector(silence_s=0.2),
                            synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                            transcriber_factory=lambda: FakeTranscriber(four, words_per_s=6.0, final_delay_s=0.02))
    await one_turn(cfg, comps)
    assert llm.requests and list(llm.requests)[-1][-1]["content"] == four[0]
    ahead = [p for p in llm.prefills if p[-1] == {"role": "user", "content": four[0]}]
    assert len(ahead) == (0 if preemptive else 1), list(llm.prefills)


async def test_acknowledgement_fires_when_the_first_token_is_late_and_not_when_it_is_not():
    cfg = fake_config(preemptive=False)
    _, slow = await one_turn(cfg, fake_components(cfg, FakeLLM(["Sure."], ttft_s=1.2)), wait_s=4)
    report = slow.of("budget")[0]
    assert report["acknowledged"] and report["marks"]["acknowledgement"] < 0.5, report["marks"]
    assert report["perceived_ms"] < 700  # the ack keeps the silence near the budget
    _, fast = await one_turn(cfg, fake_components(cfg, FakeLLM(["Sure."], ttft_s=0.02)))
    assert not fast.of("budget")[0]["acknowledged"]


async def test_interruption_stops_output_within_100_ms_and_aborts_the_request():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    long_reply = " ".join(["This reply goes on and on, word after word, for a long while."] * 6)
    llm = FakeLLM([long_reply, "Okay."], ttft_s=0.05, token_s=0.08)
    vs, run = await start(cfg, fake_components(cfg, llm))
    try:
        await play(vs, run, with_silence(piper_speech(QUESTION), 0.3, 0.2))
        assert await wait_for(run, lambda: run.first_audible() is not None, 4)
        await play(vs, run, silence(0.6))
        barge = await play(vs, run, with_silence(piper_speech("Stop right there please."), 0.0, 0.5))
        assert await wait_for(run, lambda: run.of("interrupt"), 2)
        await play(vs, run, silence(1.0))
    finally:
        await vs.aclose()
    heard = next(t for t, e in run.events if e["type"] == "vad" and e["speaking"] and t > barge)
    interrupt = next(t for t, e in run.events if e["type"] == "interrupt")
    assert interrupt - heard <= 0.1, (heard, interrupt)
    # the reply's audio stops at once (paused; dropped once the words are heard), and nothing
    # plays until the answer to the new turn
    late = [t for t, p in run.out if heard + 0.1 + 0.02 < t < heard + 0.4]
    assert not late, late
    assert not llm._live  # the engine request was aborted, not left running
    replies = [e["text"] for e in run.of("reply")]
    assert replies[0] != long_reply and long_reply.startswith(replies[0].rstrip(",. ")), replies  # what was played


def _raising_reply(messages):
    raise RuntimeError("the LLM fell over")


async def test_a_failing_stage_is_apologized_for_and_the_session_goes_on():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    synth = FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02)
    llm = FakeLLM([_raising_reply, "Here is a fine reply."], ttft_s=0.02)
    vs, run = await start(cfg, fake_components(cfg, llm, synth=synth))
    try:
        q = with_silence(piper_speech(QUESTION), 0.3, 0.2)
        await play(vs, run, q)
        assert await wait_for(run, lambda: run.of("error"), 5)
        assert await wait_for(run, lambda: any("Sorry" in t for t in synth.texts), 5), synth.texts
        await play(vs, run, silence(1.5))
        await play(vs, run, q)
        assert await wait_for(run, lambda: any(e["text"] == "Here is a fine reply." for e in run.of("reply")), 6)
    finally:
        await vs.aclose()


def custom_llm():
    """`--llm tests.test_pipeline_session:custom_llm`: a factory of a livekit llm.LLM."""
    from llm_engine.sampling_params import SamplingParams

    return ParleyLLM(FakeLLM(["The custom model answers."], ttft_s=0.02), SamplingParams(max_tokens=20))


async def test_a_custom_llm_by_module_attr_is_the_one_answering():
    cfg = SessionConfig(llm="tests.test_pipeline_session:custom_llm", stt="fake", tts="fake", preemptive=False)
    comps = load_components(cfg, detector=FakeEndOfTurnDetector(silence_s=0.2),
                            synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                            transcriber_factory=fake_transcriber)
    assert comps.engine is None and comps.llm is not None
    _, run = await one_turn(cfg, comps)
    assert [e["text"] for e in run.of("reply")] == ["The custom model answers."]


def test_loading_a_session_caps_numpy_blas_at_its_budget():
    """numpy's BLAS gets the session's budget (process-wide, like torch's llm_threads): its
    idle workers spin between calls, CPU the stages need (pipeline.components)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    with threadpool_limits(limits=2, user_api="blas"):  # restored on exit: other tests see numpy's own
        assert blas() == {2}  # numpy's wheels bring OpenBLAS: a set here is never empty
        fake_components(fake_config(blas_threads=1), FakeLLM(["Hi."]))
        assert blas() == {1}
    with pytest.raises(ValueError, match="blas_threads"):
        SessionConfig(blas_threads=0)


def test_a_bad_module_attr_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot import"):
        load_components(SessionConfig(llm="tests.nothing_here:llm", stt="fake", tts="fake"))


async def test_bad_frames_are_converted_or_refused_and_the_session_survives():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    vs, run = await start(cfg, fake_components(cfg, FakeLLM(["Still here."], ttft_s=0.02)))
    try:
        for bad in (np.zeros(0, np.int16), np.full(320, np.nan, np.float32), np.zeros(320, np.int8),
                    np.zeros(16_000 * 3, np.int16), np.ones(320, np.float32) * 300):
            with pytest.raises(AudioFormatError):
                vs.push_audio(bad, 16_000)
        with pytest.raises(AudioFormatError):
            vs.push_audio(np.zeros(320, np.int16), 123)
        stereo48 = np.repeat(with_silence(piper_speech(QUESTION), 0.3, 0.2)[:, None], 2, axis=1)
        from parley.audio import resample

        stereo48 = np.stack([resample(stereo48[:, 0], 16_000, 48_000)] * 2, axis=1).astype(np.float64)
        step = 960
        for i in range(0, len(stereo48), step):  # float64 stereo at 48 kHz: converted
            vs.push_audio(stereo48[i:i + step], 48_000)
            await asyncio.sleep(0.02)
        with pytest.raises(AudioFormatError, match="changed"):
            vs.push_audio(np.zeros(320, np.int16), 16_000)
        assert await wait_for(run, lambda: run.of("reply"), 4)
    finally:
        await vs.aclose()
    assert run.of("reply")[0]["text"] == "Still here."


def test_config_from_toml_and_flags(tmp_path):
    import argparse

    path = tmp_path / "s.toml"
    path.write_text('llm = "fake"\nmax_tokens = 30\n[budget]\ntotal_ms = 800\n[response]\nack_enabled = false\n')
    cfg = SessionConfig.from_toml(path)
    assert cfg.max_tokens == 30 and cfg.budget.total_ms == 800 and not cfg.response.ack_enabled
    parser = argparse.ArgumentParser()
    SessionConfig.add_arguments(parser)
    args = parser.parse_args(["--config", str(path), "--tts", "espeak", "--no-preemptive"])
    cfg2 = SessionConfig.from_args(args)
    assert (cfg2.tts, cfg2.preemptive, cfg2.max_tokens) == ("espeak", False, 30)
    path.write_text("nonsense_key = 1\n")
    with pytest.raises(ValueError, match="unknown session config keys: nonsense_key"):
        SessionConfig.from_toml(path)
    with pytest.raises(ValueError, match="base_url"):
        SessionConfig(llm="openai")
    with pytest.raises(ValueError, match="context_tokens"):
        SessionConfig(llm="fake", max_tokens=100, context_tokens=150)


async def test_the_session_talks_to_parley_serve_through_llm_openai(monkeypatch):
    """`--llm openai --base-url URL`: livekit's OpenAI plugin against our own server, the local
    stand-in for a vLLM / SGLang cluster."""
    from llm_engine import LLMEngine
    from llm_engine.server import ServerConfig, ServerThread

    engine = LLMEngine.from_pretrained(num_threads=1)
    server = ServerThread(engine, ServerConfig(port=0, api_key="k3y", model_name="smollm2")).start()
    try:
        monkeypatch.setenv("PARLEY_TEST_KEY", "k3y")
        cfg = SessionConfig(llm="openai", base_url=server.base_url, model="smollm2", api_key_env="PARLEY_TEST_KEY",
                            stt="fake", tts="fake", preemptive=False, response=ResponsePolicy(ack_enabled=False))
        comps = load_components(cfg, detector=FakeEndOfTurnDetector(silence_s=0.2),
                                synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                                transcriber_factory=fake_transcriber)
        _, run = await one_turn(cfg, comps, wait_s=20)
        replies = run.of("reply")
        assert replies and replies[0]["text"].strip(), run.events[-5:]
        assert run.of("budget")[0]["perceived_ms"] > 0
    finally:
        server.stop()


async def test_vad_only_turn_detection_ends_the_turn_after_the_configured_silence():
    cfg = fake_config(turn_detection="vad", vad_silence_s=0.6, preemptive=False,
                      response=ResponsePolicy(ack_enabled=False))
    comps = load_components(cfg, engine=FakeLLM(["Fine."], ttft_s=0.02),
                            synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                            transcriber_factory=fake_transcriber)
    _, run = await one_turn(cfg, comps, audio=with_silence(piper_speech(QUESTION), 0.3, 0.8))
    endpointing = next(s for s in run.of("budget")[0]["stages"] if s["name"] == "endpointing")
    assert 600 <= endpointing["ms"] <= 700, endpointing


async def test_the_livekit_defaults_yardstick_answers_a_question():
    """turn_detection = "livekit": livekit's Silero, v1-mini, default endpointing, segment Whisper."""
    cfg = SessionConfig(llm="fake", tts="fake", turn_detection="livekit", preemptive=False,
                        response=ResponsePolicy(ack_enabled=False))
    comps = load_components(cfg, engine=FakeLLM(["Yes."], ttft_s=0.02),
                            synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02))
    _, run = await one_turn(cfg, comps, audio=with_silence(piper_speech(QUESTION), 0.3, 1.5), wait_s=8)
    assert [e["text"] for e in run.of("reply")] == ["Yes."]
    report = run.of("budget")[0]
    assert "weather" in report["user_text"].lower(), report
    # livekit's VAD (0.55 s of silence) and its 0.5 s minimum endpointing delay are in effect
    speech_end = 0.3 + len(piper_speech(QUESTION)) / 16_000
    assert run.first_audible() - speech_end > 0.5, (run.first_audible(), speech_end)


async def test_a_false_interruption_pauses_the_reply_and_resumes_it():
    """A short sound with no words (a cough, an "hm") over the agent pauses its audio at once;
    when no words come within false_interruption_timeout_s, the same reply plays on."""
    cfg = fake_config(preemptive=False, false_interruption_timeout_s=0.6,
                      response=ResponsePolicy(ack_enabled=False))
    long_reply = " ".join(["This reply goes on and on, word after word, for a long while."] * 4)
    llm = FakeLLM([long_reply], ttft_s=0.05, token_s=0.02)
    comps = load_components(cfg, engine=llm, detector=FakeEndOfTurnDetector(silence_s=0.2),
                            synthesizer=FakeSynthesizer(first_audio_delay_s=0.02, rtf=0.02),
                            transcriber_factory=lambda: FakeTranscriber((WORDS[0], ""), words_per_s=6.0,
                                                                        final_delay_s=0.02))
    vs, run = await start(cfg, comps)
    try:
        await play(vs, run, with_silence(piper_speech(QUESTION), 0.3, 0.2))
        assert await wait_for(run, lambda: run.first_audible() is not None, 4, vs)
        await play(vs, run, silence(0.5))
        cough = await play(vs, run, with_silence(piper_speech("Hm."), 0.0, 0.1))
        assert await wait_for(run, lambda: run.of("interrupt"), 1, vs)
        paused_at = next(t for t, e in run.events if e["type"] == "interrupt")
        assert await wait_for(run, lambda: run.out[-1][0] > paused_at + 0.5, 4, vs)
    finally:
        await vs.aclose()
    assert paused_at > cough
    after = [t for t, _ in run.out if t > paused_at]
    gap = after[0] - paused_at if after else None
    assert gap is not None and 0.3 < gap < 2.5, gap  # silent while paused, then the same reply again
    assert len(llm.requests) == 1  # the same reply resumed: no new request, no abort


async def test_a_reply_past_max_tokens_finishes_its_sentence_and_no_more():
    cfg = fake_config(preemptive=False, max_tokens=4, sentence_grace_tokens=20, response=ResponsePolicy(ack_enabled=False))
    llm = FakeLLM(["One two three four five six, seven 3.5 eight. Nine ten eleven. Twelve."], ttft_s=0.02)
    _, run = await one_turn(cfg, fake_components(cfg, llm))
    assert [e["text"] for e in run.of("reply")] == ["One two three four five six, seven 3.5 eight."]
    # a sentence still open at the hard limit (max_tokens + grace) is cut there, as before
    cfg = fake_config(preemptive=False, max_tokens=2, sentence_grace_tokens=3, response=ResponsePolicy(ack_enabled=False))
    _, run = await one_turn(cfg, fake_components(cfg, FakeLLM(["One two three four five six seven."], ttft_s=0.02)))
    assert [e["text"] for e in run.of("reply")] == ["One two three four five"]


async def test_a_reply_ends_at_its_max_sentences_th_sentence_and_aborts_the_request():
    reply = "It is 3.5 degrees. Take a coat, Dr. Smith. The wind is strong. Stay warm."
    for n, said in ((1, "It is 3.5 degrees."), (2, "It is 3.5 degrees. Take a coat, Dr. Smith."), (0, reply)):
        cfg = fake_config(preemptive=False, max_sentences=n, response=ResponsePolicy(ack_enabled=False))
        llm = FakeLLM([reply], ttft_s=0.02, token_s=0.01)
        _, run = await one_turn(cfg, fake_components(cfg, llm))
        assert [e["text"] for e in run.of("reply")] == [said], n
        assert not llm._live  # a reply ended early aborted its engine request, not left it running
    with pytest.raises(ValueError, match="max_sentences"):
        fake_config(max_sentences=-1)


async def test_a_reply_that_says_a_sentence_again_ends_there_and_aborts_the_request():
    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    loop = "It is sunny. I love the sun. I love the sun. I love the sun. I love"
    llm = FakeLLM([loop], ttft_s=0.02, token_s=0.01)
    _, run = await one_turn(cfg, fake_components(cfg, llm))
    assert [e["text"] for e in run.of("reply")] == ["It is sunny. I love the sun."]
    assert not llm._live  # the engine request was aborted, not left running


async def test_an_unrecorded_session_keeps_no_event_log():
    # livekit keeps every event it emits for a recording's report (~120 KB a turn, measured):
    # with nothing recording, none is kept, and listeners still get every event
    cfg = fake_config(preemptive=False)
    vs, run = await start(cfg, fake_components(cfg, FakeLLM(["It is sunny and warm."], ttft_s=0.05)))
    seen = []
    vs.session.on("agent_state_changed", seen.append)
    try:
        await play(vs, run, with_silence(piper_speech(QUESTION), 0.3, 0.2))
        await wait_for(run, lambda: run.of("budget"), 3.0)
        assert not vs.session.recording
        assert vs.session._recorded_events == []  # livekit's own list, read by its report
        assert len(seen) >= 2 and run.of("state")
    finally:
        await vs.aclose()


class _WarmRecorder(FakeLLM):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.warmed: list = []

    def warmup(self, messages=None) -> float:
        self.warmed.append(messages)
        return 0.0


@pytest.mark.unit
def test_load_components_warms_the_stages_it_builds_and_not_those_handed_in(monkeypatch):
    import llm_engine

    built: list[_WarmRecorder] = []

    def recorder(*_a, **_k):
        built.append(_WarmRecorder(["Hi."]))
        return built[-1]

    monkeypatch.setattr(llm_engine, "FakeLLM", recorder)
    cfg = SessionConfig(llm="fake", stt="fake", tts="fake", instructions="Be brief.")
    load_components(cfg, detector=FakeEndOfTurnDetector(silence_s=0.2))
    assert [e.warmed for e in built] == [[[{"role": "system", "content": "Be brief."}]]]
    handed = _WarmRecorder(["Hi."])
    load_components(cfg, engine=handed, detector=FakeEndOfTurnDetector(silence_s=0.2))
    assert handed.warmed == []


def _reply_played(run) -> float | None:
    """When the agent went back to listening after it first spoke (None: not yet)."""
    spoke = False
    for t, e in run.events:  # in the order they came
        if e["type"] == "state":
            if spoke and e["agent"] == "listening":
                return t
            spoke = spoke or e["agent"] == "speaking"
    return None


@pytest.mark.parametrize("collect", [True, False])
async def test_a_full_collection_follows_each_played_reply(collect):
    """collect_after_reply: the turn's cyclic garbage goes when the reply has played, not ~85
    turns later at CPython's next full collection (benchmarks/soak.py measures the memory)."""
    import gc
    import time

    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False), collect_after_reply=collect)
    vs, run = await start(cfg, fake_components(cfg, FakeLLM(["It is sunny."], ttft_s=0.05, token_s=0.01)))
    full: list[float] = []  # when each full collection started

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(time.monotonic() - run.t0)

    gc.callbacks.append(on_gc)
    try:
        await play(vs, run, with_silence(piper_speech(QUESTION), 0.3, 0.2))
        await wait_for(run, lambda: _reply_played(run) is not None, 8.0, vs)
        await asyncio.sleep(0.3)
    finally:
        gc.callbacks.remove(on_gc)
        await vs.aclose()
    played = _reply_played(run)
    assert played is not None, run.events
    assert bool([t for t in full if played - 0.05 <= t <= played + 0.3]) == collect, (full, played)
