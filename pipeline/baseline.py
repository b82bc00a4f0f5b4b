"""What a user assembles today from LiveKit's defaults and the same local parts: the yardstick
the voice benchmark holds Parley against (`turn_detection = "livekit"` in a SessionConfig).

- livekit's own Silero VAD plugin (its defaults: 0.55 s of silence ends speech);
- LiveKit's audio turn detector, `inference.TurnDetector` (the local "v1-mini" offline);
- default endpointing (min 0.5 s, max 3 s), no preemptive generation;
- non-streaming Whisper: one decode of each VAD segment (livekit's StreamAdapter);
- the same LLM (our engine through ParleyLLM) and Piper, sentence by sentence.
Budget marks come from the session's events (no Hearing here), so its stage times are coarser
than Parley's: the benchmark's perceived latency, measured from the audio, is the figure."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from livekit.agents import Agent, AgentSession, stt, utils
from livekit.agents import tts as lk_tts
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions, NotGivenOr

from parley.audio import ENGINE_RATE, resample
from pipeline.budget import LatencyBudget


class OfflineWhisperSTT(stt.STT):
    """One Whisper decode per buffer (no interim results): livekit's non-streaming STT shape."""

    def __init__(self, decoder) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=False, interim_results=False))
        self.decoder = decoder

    @property
    def model(self) -> str:
        return "whisper"

    @property
    def provider(self) -> str:
        return "parley"

    async def _recognize_impl(self, buffer, *, language: NotGivenOr[str] = NOT_GIVEN,
                              conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> stt.SpeechEvent:
        frame = utils.merge_frames(buffer)
        pcm = np.frombuffer(frame.data, dtype=np.int16).reshape(-1, frame.num_channels).mean(axis=1)
        audio = resample((pcm / 32768.0).astype(np.float32), frame.sample_rate, ENGINE_RATE)

        def decode() -> str:
            from stt import transcribe

            return transcribe(audio, ENGINE_RATE, decoder=self.decoder).text

        text = await asyncio.to_thread(decode)
        return stt.SpeechEvent(stt.SpeechEventType.FINAL_TRANSCRIPT,
                               alternatives=[stt.SpeechData(language="en", text=text)])


def build_livekit_default_session(config, components, budget: LatencyBudget, llm_plugin, tts_plugin):
    from livekit.agents import inference
    from livekit.plugins import silero

    vad = silero.VAD.load()
    session = AgentSession(
        stt=stt.StreamAdapter(stt=OfflineWhisperSTT(components.decoder), vad=vad), vad=vad,
        llm=llm_plugin, tts=lk_tts.StreamAdapter(tts=tts_plugin),
        turn_handling={"turn_detection": inference.TurnDetector(version="v1-mini"),
                       "preemptive_generation": {"enabled": False}},
        user_away_timeout=None)

    @session.on("user_state_changed")
    def _user_state(ev) -> None:
        if ev.new_state == "speaking":
            budget.open_turn()
        elif ev.old_state == "speaking":
            budget.mark("speech_end", time.monotonic())

    @session.on("user_input_transcribed")
    def _transcribed(ev) -> None:
        if ev.is_final:
            budget.mark("final_transcript")
            if budget.turn is not None:
                budget.turn.user_text = ev.transcript

    @session.on("agent_state_changed")
    def _agent_state(ev) -> None:
        if ev.new_state == "thinking":
            budget.mark("end_of_turn")

    return session, Agent(instructions=config.instructions)
