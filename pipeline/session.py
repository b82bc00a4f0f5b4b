"""The voice session: Parley's stages as one livekit-agents `AgentSession` + `Agent`.

`build_session(config, components, budget)` returns the AgentSession and Agent, ready for a
LiveKit room (`session.start(agent, room=...)`) or for any serverless transport through
`VoiceSession` (pipeline/transport.py's SessionHandle), which the local page, the benchmark
and the tests use. Turn taking: livekit's "stt" mode with zero endpointing delay, so the turn
ends exactly when our detector decides (pipeline/plugins/hearing.py says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from livekit.agents import Agent, AgentSession

from parley.errors import ParleyError
from pipeline.agent_session import ParleyAgentSession
from pipeline.audio_io import PacedAudioOutput, PushAudioInput, to_int16_mono
from pipeline.baseline import build_livekit_default_session
from pipeline.budget import LatencyBudget
from pipeline.components import Components, load_components
from pipeline.config import SessionConfig
from pipeline.context import ContextTrim
from pipeline.hearing import Hearing, HearingEvent
from pipeline.plugins.hearing import ParleySTT, ParleyVAD
from pipeline.plugins.llm import ParleyLLM, PrefillAhead, chat_messages, without_dropped
from pipeline.plugins.tts import ParleyTTS
from pipeline.transport import AudioSink, EventSink, SessionFactory

log = logging.getLogger("parley.session")
APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"


class SessionParts:
    """What build_session made: the AgentSession, the Agent, and Parley's own pieces."""

    def __init__(self, session: AgentSession, agent: Agent, hearing: Hearing | None, budget: LatencyBudget,
                 llm: Any, tts: ParleyTTS) -> None:
        self.session, self.agent, self.hearing, self.budget = session, agent, hearing, budget
        self.llm, self.tts = llm, tts


def build_session(config: SessionConfig, components: Components, budget: LatencyBudget | None = None,
                  *, on_hearing: Any = None) -> SessionParts:
    """Call inside the running event loop (livekit binds the session to it)."""
    budget = budget or LatencyBudget(config.budget)
    llm_plugin = components.llm or ParleyLLM(components.engine, components.sampling_params(),
                                             marks=lambda name: budget.mark(name), policy=config.response,
                                             time_left_s=budget.time_left_s, deadline_s=config.llm_deadline_s,
                                             trim=config.trim,
                                             sentence_after_tokens=config.max_tokens if config.sentence_grace_tokens else None,
                                             max_sentences=config.max_sentences)
    tts_plugin = ParleyTTS(components.synthesizer, sample_rate=config.output_rate, policy=config.response,
                           time_left_s=budget.time_left_s, marks=lambda name: budget.mark(name),
                           deadline_s=config.tts_deadline_s)
    if config.turn_detection == "livekit":  # the yardstick: LiveKit's defaults with the same parts
        session, agent = build_livekit_default_session(config, components, budget, llm_plugin, tts_plugin)
        return SessionParts(session, agent, None, budget, llm_plugin, tts_plugin)
    agent = Agent(instructions=config.instructions)
    history = [_history(agent, config)]  # the conversation before the current user turn, trimmed

    detector = components.detector
    witness = None  # the LLM text witness, scoring off the hearing thread
    if _llm_witness(config, components):
        from pipeline.turn_text import BackgroundScorer, EngineCompletenessScorer
        from turn_detection.policy import EndpointingPolicy

        probe, policy = _witness_probe(config)
        # read on the scorer's thread; replaced (never mutated) on the loop at each speech start
        scorer = EngineCompletenessScorer(components.engine, detector.text_scorer, context=lambda: history[0],
                                          timeout_s=config.turn_text_timeout_s, probe=probe)
        # closed with the hearing (Hearing.close closes its detector's text scorer)
        witness = BackgroundScorer(scorer)
        detector = detector.with_text_scorer(witness, EndpointingPolicy.load(policy))
    hearing = Hearing(components.vad, components.new_transcriber(), detector,
                      final_deadline_s=config.stt_deadline_s, new_transcriber=components.new_transcriber)
    ahead = None
    if config.prefill_ahead and components.engine is not None and components.llm is None:
        ahead = PrefillAhead(components.engine, lambda: _history(agent, config), trim=config.trim)

    # With preemptive replies the preflight transcript IS the request, sent at once: a prefill
    # ahead of it came ~5 ms before the reply and held it for a 70-135 ms step, computing
    # the same tokens (the voice benchmark's engine trace, 2-core Zen 1)
    ahead_kinds = ("interim",) if config.preemptive else ("interim", "preflight")

    def on_event(ev: HearingEvent) -> None:
        if ahead is not None and ev.kind in ahead_kinds:
            ahead.update(ev.text, ev.t)
        if ev.kind == "speech_start":
            budget.open_turn(ev.t, ev.turn)
            if witness is not None:
                history[0] = turn_context(components.engine, _history(agent, config), config.trim)
                witness.forget()
        elif ev.kind == "end_of_turn":
            budget.mark("speech_end", ev.t - ev.silence_s)
            budget.mark("end_of_turn", ev.t)
        elif ev.kind == "final":
            budget.mark("final_transcript", ev.t)
            if budget.turn is not None:
                budget.turn.user_text = ev.text
        if on_hearing is not None:
            on_hearing(ev)

    session = ParleyAgentSession(
        stt=ParleySTT(hearing, model_name=config.stt, on_event=on_event), vad=ParleyVAD(hearing),
        llm=llm_plugin, tts=tts_plugin,
        turn_handling={
            "turn_detection": "stt",
            # our detector has already waited: livekit must add nothing on top (measured in tests)
            "endpointing": {"mode": "fixed", "min_delay": 0.0, "max_delay": 3.0},
            "interruption": {"enabled": True, "mode": "vad", "min_duration": config.interruption_min_s,
                             "resume_false_interruption": True,
                             "false_interruption_timeout": config.false_interruption_timeout_s},
            "preemptive_generation": {"enabled": config.preemptive, "preemptive_tts": config.preemptive},
        },
        user_away_timeout=None,
        # livekit ignores barge-in for 3 s after the agent starts speaking, for echo cancellers to
        # converge; serverless transports carry no echo, and a room's client cancels its own
        aec_warmup_duration=config.aec_warmup_s or None,
    )

    @session.on("close")
    def _closed(_ev) -> None:  # a room session ended: its threads go with it
        asyncio.get_running_loop().run_in_executor(None, hearing.close)

    forget_dropped_history(session, agent, llm_plugin)
    if config.collect_after_reply:
        collect_after_reply(session)
    return SessionParts(session, agent, hearing, budget, llm_plugin, tts_plugin)


def forget_dropped_history(session: ParleyAgentSession, agent: Agent, llm_plugin: Any) -> None:
    """After each reply, the messages its request dropped to fit the history budget leave the
    agent's chat context (they are never sent again: plugins/llm.without_dropped) and the
    session's history keeps as many items: a long session's history stays bounded (a 200-turn
    soak kept all 402 items) and the prefix the engine has cached stays the same."""
    pending: set[asyncio.Task] = set()

    @session.on("conversation_item_added")
    def _forget(ev) -> None:
        if getattr(ev.item, "role", None) != "assistant":
            return
        trimmed = without_dropped(agent.chat_ctx, getattr(llm_plugin, "last_messages", []))
        if trimmed is None:
            return
        task = asyncio.get_running_loop().create_task(agent.update_chat_ctx(trimmed))
        pending.add(task)
        task.add_done_callback(pending.discard)
        session.trim_history(len(trimmed.items))


def collect_after_reply(session: ParleyAgentSession) -> None:
    """A full garbage collection each time a reply has played out (speaking -> listening), before
    the user's next turn. Each turn leaves a few hundred objects in reference cycles (~290 in a
    fake-stage soak), which only a full collection frees; on CPython's own schedule one came
    every ~85 turns (7 in a 600-turn soak), and the pages the garbage filled meanwhile made
    resident memory creep for the first ~120 turns: 4.06 MB per 100 turns over turns 40-200.
    Collected after each reply: 0.38 on the same host, at 2.3 ms a collection at most, as the
    loaded objects are frozen (pipeline.allocator.freeze_loaded_objects). benchmarks/soak.py."""

    @session.on("agent_state_changed")
    def _collect(ev) -> None:
        if ev.old_state == "speaking" and ev.new_state == "listening":
            asyncio.get_running_loop().call_soon(_full_collection)


def _full_collection() -> None:
    t0 = time.perf_counter()
    found = gc.collect()
    log.debug("full collection after a reply: %d unreachable, %.1f ms", found, (time.perf_counter() - t0) * 1000)


def _llm_witness(config: SessionConfig, components: Components) -> bool:
    """Our detector with the voice LLM judging the words (config.turn_text "llm" / "llm-raw"): only with our
    engine (an external LLM gives no next-token probabilities) and a detector that has a word
    scorer to fall back on."""
    return (config.turn_text in ("llm", "llm-raw") and components.llm is None
            and hasattr(components.engine, "score_prompt")
            and hasattr(components.detector, "with_text_scorer")
            and getattr(components.detector, "text_scorer", None) is not None)


def _witness_probe(config: SessionConfig) -> tuple[Any, Path]:
    """The LLM witness's probe and policy: the embedded model's probe (pipeline.turn_probe) and
    the policy chosen on its P; another model (config.model) has no probe, so its raw P and the
    policy chosen on that (also turn_text "llm-raw")."""
    from turn_detection.policy import LLM_PROBE_POLICY, LLM_TEXT_POLICY

    if config.model is not None or config.turn_text == "llm-raw":
        return None, LLM_TEXT_POLICY
    from pipeline.turn_probe import TextProbe

    return TextProbe.load(), LLM_PROBE_POLICY


def turn_context(engine: Any, history: list[dict[str, str]], trim: ContextTrim) -> list[dict[str, str]]:
    """The history the LLM witness puts before the user's words: trimmed as the turn's real
    request will be, so its prefix is the one the engine's cache holds (an untrimmed history of
    a long session would re-prefill thousands of tokens per pause and time out)."""
    kept = trim.fit(engine, [*history, {"role": "user", "content": ""}])
    return kept[:-1]


def _history(agent: Agent, config: SessionConfig) -> list[dict[str, str]]:
    """The conversation as the next request will send it, before the new user turn."""
    msgs = chat_messages(agent.chat_ctx)
    if not msgs or msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": config.instructions})
    return msgs


class VoiceSession:
    """One serverless session behind the transport boundary (implements SessionHandle)."""

    def __init__(self, parts: SessionParts, audio_in: PushAudioInput, audio_out: PacedAudioOutput,
                 events: EventSink) -> None:
        self.parts, self._in, self._out, self._events = parts, audio_in, audio_out, events
        self._closed = False
        self._apologizing = False

    @property
    def budget(self) -> LatencyBudget:
        return self.parts.budget

    @property
    def session(self) -> AgentSession:
        return self.parts.session

    def push_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        if self._closed:
            raise ParleyError("the session is closed")
        self._in.push(to_int16_mono(pcm, sample_rate), int(sample_rate))

    def emit(self, event: dict[str, Any]) -> None:
        try:
            self._events(event)
        except Exception:  # a transport's callback must not break the session
            log.exception("event sink failed on %s", event.get("type"))

    def apologize(self, cause: str) -> None:
        """A stage failed: say so briefly instead of going silent, and carry on."""
        log.warning("stage failure, apologizing: %s", cause)
        self.emit({"type": "error", "message": cause, "retryable": True})
        if self._apologizing or self._closed:
            return
        self._apologizing = True
        handle = self.session.say(APOLOGY, add_to_chat_ctx=False)
        handle.add_done_callback(lambda _h: setattr(self, "_apologizing", False))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._in.close()
        with contextlib.suppress(Exception):
            await self.session.aclose()
        await self._out.aclose()
        if self.parts.hearing is not None:
            await asyncio.to_thread(self.parts.hearing.close)


def _wire_events(vs: VoiceSession) -> None:
    session, budget = vs.session, vs.budget
    budget.subscribe(vs.emit)

    @session.on("agent_state_changed")
    def _state(ev) -> None:
        if ev.new_state in ("listening", "thinking", "speaking"):
            vs.emit({"type": "state", "agent": ev.new_state})

    @session.on("conversation_item_added")
    def _item(ev) -> None:
        item = ev.item
        if getattr(item, "role", None) == "assistant" and item.text_content:
            turn = budget.reports[-1]["turn"] if budget.reports else 0
            vs.emit({"type": "reply", "text": item.text_content, "final": True, "turn": turn})

    @session.on("error")
    def _error(ev) -> None:
        vs.apologize(f"{type(ev.source).__name__}: {ev.error}")


async def start_voice_session(config: SessionConfig, components: Components, audio_sink: AudioSink,
                              event_sink: EventSink, *, lead_s: float = 0.0,
                              playout_speed: float = 1.0) -> VoiceSession:
    turn_of = {"n": 0}
    holder: dict[str, VoiceSession] = {}

    def on_hearing(ev: HearingEvent) -> None:
        vs = holder.get("vs")
        if vs is None:
            return
        if ev.kind in ("interim", "preflight", "final"):
            vs.emit({"type": "transcript", "final": ev.kind == "final", "text": ev.text, "turn": ev.turn})
        elif ev.kind in ("speech_start", "speech_end"):
            vs.emit({"type": "vad", "speaking": ev.kind == "speech_start", "t": ev.t})
        elif ev.kind == "error":
            vs.apologize(f"hearing: {ev.text}")
        turn_of["n"] = ev.turn

    parts = build_session(config, components, on_hearing=on_hearing)
    audio_in = PushAudioInput()
    audio_out = PacedAudioOutput(
        audio_sink, sample_rate=config.output_rate, lead_s=lead_s,
        on_first_frame=lambda t: parts.budget.mark("output_first_frame", t),
        on_clear=lambda: holder["vs"].emit({"type": "interrupt", "turn": turn_of["n"]}), speed=playout_speed)
    vs = VoiceSession(parts, audio_in, audio_out, event_sink)
    holder["vs"] = vs
    _wire_events(vs)
    parts.session.input.audio = audio_in
    parts.session.output.audio = audio_out
    await parts.session.start(parts.agent)
    return vs


def session_factory(config: SessionConfig | None = None, components: Components | None = None,
                    *, lead_s: float = 0.0) -> SessionFactory:
    """The transports' entry point: models load once (on the first session), each call starts
    a new session on them."""
    config = config or SessionConfig()
    loaded: dict[str, Components] = {} if components is None else {"c": components}
    lock = asyncio.Lock()

    async def factory(audio_sink: AudioSink, event_sink: EventSink) -> VoiceSession:
        async with lock:
            if "c" not in loaded:
                loaded["c"] = await asyncio.to_thread(load_components, config)
        return await start_voice_session(config, loaded["c"], audio_sink, event_sink, lead_s=lead_s)

    return factory
