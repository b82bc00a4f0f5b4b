"""`ParleySTT` and `ParleyVAD`: livekit plugins over one shared `Hearing` (pipeline/hearing.py).

The STT stream is the session's ears: it feeds every input frame to the Hearing, and turns
its events into livekit speech events. The turn ends when OUR detector decides: the final
transcript (a flush of the streaming transcriber) and END_OF_SPEECH are emitted together, and
the session runs in livekit's "stt" turn-detection mode with zero endpointing delay, so
livekit adds no wait of its own on top. The VAD plugin runs no model: it relays the same
Silero decisions (for interruptions and the user's speaking state), so Silero runs once per
window for the whole session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import numpy as np
from livekit import rtc
from livekit.agents import stt, vad
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions, NotGivenOr

from pipeline.hearing import Hearing, HearingEvent
from turn_detection.vad import WINDOW_S


def _wall(t_monotonic: float) -> float:
    """A monotonic instant as wall-clock time (livekit's speech times are time.time())."""
    return time.time() - (time.monotonic() - t_monotonic)


def frame_pcm(frame: rtc.AudioFrame) -> np.ndarray:
    pcm = np.frombuffer(frame.data, dtype=np.int16)
    if frame.num_channels > 1:
        pcm = pcm.reshape(-1, frame.num_channels).astype(np.int32).mean(axis=1).astype(np.int16)
    return pcm


class ParleySTT(stt.STT):
    """`on_event(ev)` sees every HearingEvent first (the session's budget and transcript log)."""

    def __init__(self, hearing: Hearing, *, model_name: str = "whisper",
                 on_event: Callable[[HearingEvent], None] = lambda _ev: None) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=True, interim_results=True,
                                                          offline_recognize=False))
        self.hearing, self._model_name, self._on_event = hearing, model_name, on_event

    @property
    def model(self) -> str:
        return self._model_name

    @property
    def provider(self) -> str:
        return "parley"

    async def _recognize_impl(self, buffer, *, language: NotGivenOr[str] = NOT_GIVEN,
                              conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> stt.SpeechEvent:
        raise NotImplementedError("ParleySTT is streaming-only (offline: stt.transcribe / `parley transcribe`)")

    def stream(self, *, language: NotGivenOr[str] = NOT_GIVEN,
               conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> ParleySTTStream:
        return ParleySTTStream(stt=self, conn_options=conn_options)


class ParleySTTStream(stt.RecognizeStream):
    _audio_s = 0.0  # audio heard since the last usage report

    async def _run(self) -> None:
        plugin: ParleySTT = self._stt  # type: ignore[assignment]
        hearing = plugin.hearing
        hearing.start(asyncio.get_running_loop())
        events = hearing.subscribe()

        async def forward() -> None:
            async for frame in self._input_ch:
                if not isinstance(frame, self._FlushSentinel):  # our detector decides the turn's end
                    hearing.push(frame_pcm(frame), frame.sample_rate)
                    self._audio_s += frame.duration

        forwarder = asyncio.create_task(forward())
        get: asyncio.Future | None = None
        try:
            while True:
                get = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({get, forwarder}, return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    return  # input ended
                ev = get.result()
                plugin._on_event(ev)
                self._relay(ev)
        finally:
            # cancelled while waiting (the session closing): the pending get was one live
            # task left behind per closed session (benchmarks/soak.py's task count found it)
            if get is not None and not get.done():
                get.cancel()
            hearing.unsubscribe(events)
            forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forwarder

    def _relay(self, ev: HearingEvent) -> None:
        kinds = {"interim": stt.SpeechEventType.INTERIM_TRANSCRIPT,
                 "preflight": stt.SpeechEventType.PREFLIGHT_TRANSCRIPT,
                 "final": stt.SpeechEventType.FINAL_TRANSCRIPT}
        if ev.kind == "speech_start":
            self._event_ch.send_nowait(stt.SpeechEvent(stt.SpeechEventType.START_OF_SPEECH,
                                                       speech_start_time=_wall(ev.t)))
        elif ev.kind in kinds:
            data = stt.SpeechData(language="en", text=ev.text, confidence=1.0)
            self._event_ch.send_nowait(stt.SpeechEvent(kinds[ev.kind], alternatives=[data]))
            if ev.kind == "final":
                hearing = self._stt.hearing  # type: ignore[attr-defined]
                self._event_ch.send_nowait(stt.SpeechEvent(stt.SpeechEventType.END_OF_SPEECH,
                                                           speech_end_time=_wall(hearing.last_speech_t)))
                usage, self._audio_s = stt.RecognitionUsage(audio_duration=self._audio_s), 0.0
                self._event_ch.send_nowait(stt.SpeechEvent(stt.SpeechEventType.RECOGNITION_USAGE,
                                                           recognition_usage=usage))
        elif ev.kind == "error" and ev.error is not None:
            self._emit_error(ev.error, recoverable=True)


class ParleyVAD(vad.VAD):
    """Relays the Hearing's Silero decisions; runs no model of its own."""

    def __init__(self, hearing: Hearing) -> None:
        super().__init__(capabilities=vad.VADCapabilities(update_interval=WINDOW_S))
        self.hearing = hearing

    @property
    def model(self) -> str:
        return "silero"

    @property
    def provider(self) -> str:
        return "parley"

    def stream(self) -> ParleyVADStream:
        return ParleyVADStream(self)


class ParleyVADStream(vad.VADStream):
    async def _main_task(self) -> None:
        hearing: Hearing = self._vad.hearing  # type: ignore[attr-defined]
        events = hearing.subscribe()

        async def drain() -> None:  # the frames reach the Hearing through the STT stream
            async for _ in self._input_ch:
                pass

        drainer = asyncio.create_task(drain())
        speech_s = silence_s = 0.0
        try:
            while True:
                ev = await events.get()
                if ev.kind == "vad":
                    speech_s, silence_s = ev.speech_s, ev.silence_s
                    self._send(vad.VADEventType.INFERENCE_DONE, ev, speech_s, silence_s)
                elif ev.kind == "speech_start":
                    self._send(vad.VADEventType.START_OF_SPEECH, ev, max(speech_s, WINDOW_S), 0.0)
                elif ev.kind == "speech_end":
                    self._send(vad.VADEventType.END_OF_SPEECH, ev, speech_s, silence_s)
        finally:
            hearing.unsubscribe(events)
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer

    def _send(self, kind: vad.VADEventType, ev: HearingEvent, speech_s: float, silence_s: float) -> None:
        self._event_ch.send_nowait(vad.VADEvent(
            type=kind, samples_index=0, timestamp=time.time(), speech_duration=speech_s,
            silence_duration=silence_s, probability=ev.probability, speaking=ev.speaking,
            raw_accumulated_silence=silence_s, raw_accumulated_speech=speech_s))
