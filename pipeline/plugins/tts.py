"""`ParleyTTS`: a streaming livekit `tts.TTS` over our SpeechStream (text deltas in, 20 ms
frames out at the output's rate, cancelled on interruption), acting on the latency budget:

- the first chunk is sized from the time left: with time to spare it waits for a clause (up
  to `max_first_words`), with little it speaks after one or two words;
- when no text has come by the time the budget needs audio (`ack_margin_s` before the first
  audio deadline), a short acknowledgement, synthesized once ahead of time, plays first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from livekit.agents import tts
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions

from tts.chunker import ChunkerConfig
from tts.stream import SpeechStream, StreamConfig

log = logging.getLogger("parley.tts")


@dataclass(frozen=True)
class ResponsePolicy:
    ack_enabled: bool = True
    ack_phrases: tuple[str, ...] = ("Mm-hmm.", "Okay.", "Let me see.")
    ack_margin_s: float = 0.15  # play the acknowledgement this long before the audio deadline
    min_first_words: int = 1
    max_first_words: int = 6
    words_per_s: float = 12.0  # the LLM's pace in words, to turn time left into words to wait for
    seed: int = 0

    def __post_init__(self) -> None:
        if self.ack_enabled and not self.ack_phrases:
            raise ValueError("ack_phrases must not be empty when ack_enabled")
        if not 1 <= self.min_first_words <= self.max_first_words <= 50:
            raise ValueError("need 1 <= min_first_words <= max_first_words <= 50")
        if not 0 <= self.ack_margin_s <= 2 or self.words_per_s <= 0:
            raise ValueError("ack_margin_s must be in [0, 2] and words_per_s > 0")

    def first_words(self, time_left_s: float | None, synth_s: float = 0.05) -> int:
        if time_left_s is None:
            return self.min_first_words + 1
        words = int((time_left_s - synth_s) * self.words_per_s)
        return max(self.min_first_words, min(self.max_first_words, words))


class ParleyTTS(tts.TTS):
    """`budget` gives `time_left_s()`; `marks(name)` records first_chunk / tts_first_audio /
    ack_audio. Acknowledgements are synthesized once, on first use of the plugin."""

    def __init__(self, synthesizer, *, sample_rate: int = 24_000, policy: ResponsePolicy | None = None,
                 time_left_s: Callable[[], float | None] = lambda: None,
                 marks: Callable[[str], None] = lambda _name: None) -> None:
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True), sample_rate=sample_rate, num_channels=1)
        self.synthesizer = synthesizer
        self.policy = policy or ResponsePolicy()
        self._time_left, self._marks = time_left_s, marks
        self._acks: list[np.ndarray] | None = None
        self._rng = random.Random(self.policy.seed)

    @property
    def model(self) -> str:
        return getattr(self.synthesizer, "name", "parley")

    @property
    def provider(self) -> str:
        return "parley"

    def stream_config(self, first_words: int) -> StreamConfig:
        return StreamConfig(sample_rate=self.sample_rate, chunker=ChunkerConfig(first_max_words=first_words))

    def ack_audio(self) -> np.ndarray | None:
        """One pre-synthesized acknowledgement (int16 at the output rate), or None if disabled."""
        if not self.policy.ack_enabled:
            return None
        if self._acks is None:
            acks = []
            for phrase in self.policy.ack_phrases:
                speech = SpeechStream(self.synthesizer, self.stream_config(8)).say(phrase)
                acks.append(np.concatenate([f.pcm for f in speech] or [np.zeros(0, np.int16)]))
            self._acks = acks
        return self._acks[self._rng.randrange(len(self._acks))]

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
                   ) -> tts.ChunkedStream:
        return ParleyChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> ParleySynthesizeStream:
        return ParleySynthesizeStream(tts=self, conn_options=conn_options)


async def _pump(speech: SpeechStream, emitter: tts.AudioEmitter, on_first: Callable[[], None]) -> None:
    first = True
    async for frame in speech:
        if first:
            on_first()
            first = False
        emitter.push(frame.pcm.tobytes())


class ParleyChunkedStream(tts.ChunkedStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        plugin: ParleyTTS = self._tts  # type: ignore[assignment]
        output_emitter.initialize(request_id=uuid.uuid4().hex[:12], sample_rate=plugin.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", frame_size_ms=20)
        speech = SpeechStream(plugin.synthesizer, plugin.stream_config(plugin.policy.max_first_words))
        try:
            speech.say(self._input_text)
            await _pump(speech, output_emitter, lambda: None)
        finally:
            speech.close()
        output_emitter.flush()


class ParleySynthesizeStream(tts.SynthesizeStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        plugin: ParleyTTS = self._tts  # type: ignore[assignment]
        output_emitter.initialize(request_id=uuid.uuid4().hex[:12], sample_rate=plugin.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", frame_size_ms=20, stream=True)
        output_emitter.start_segment(segment_id=uuid.uuid4().hex[:12])
        first_text = asyncio.Event()
        speech: SpeechStream | None = None
        acked = False

        chunked = False

        async def forward() -> None:
            nonlocal speech, chunked
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel) or not data:
                    continue
                if speech is None:  # sized now: the time left is known once the text starts
                    left = plugin._time_left()
                    speech = SpeechStream(plugin.synthesizer, plugin.stream_config(plugin.policy.first_words(left)))
                    first_text.set()
                    self._mark_started()
                speech.push_text(data)
                if not chunked and speech.metrics.chunks:  # the first speakable chunk is complete
                    chunked = True
                    plugin._marks("first_chunk")
            if speech is not None:
                speech.end_input()
            first_text.set()

        def first_audio() -> None:
            if not chunked:  # the chunk came out of end_input()'s flush
                plugin._marks("first_chunk")
            plugin._marks("tts_first_audio")

        forwarder = asyncio.create_task(forward())
        try:
            acked = await self._maybe_acknowledge(plugin, first_text, output_emitter)
            await first_text.wait()
            if speech is not None:
                await _pump(speech, output_emitter, first_audio)
            await forwarder
        finally:
            forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forwarder
            if speech is not None:
                speech.close()
        if acked:
            log.info("acknowledgement played: the first text came after the budget's deadline")
        output_emitter.end_segment()

    async def _maybe_acknowledge(self, plugin: ParleyTTS, first_text: asyncio.Event,
                                 emitter: tts.AudioEmitter) -> bool:
        left = plugin._time_left()
        if not plugin.policy.ack_enabled or left is None:
            return False
        wait = left - plugin.policy.ack_margin_s
        if wait > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(first_text.wait(), wait)
        if first_text.is_set():
            return False
        audio = await asyncio.to_thread(plugin.ack_audio)
        if audio is None or not len(audio):
            return False
        plugin._marks("ack_audio")
        emitter.push(audio.tobytes())
        return True
