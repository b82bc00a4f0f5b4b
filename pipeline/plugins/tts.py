"""`ParleyTTS`: a streaming livekit `tts.TTS` over our SpeechStream (text deltas in, 20 ms
frames out at the output's rate, cancelled on interruption). It acts on the latency budget:
the first chunk is sized from the time left (pipeline.budget.ResponsePolicy.first_words): with
time to spare it waits for a clause, with little it speaks after one or two words."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from livekit.agents import APIError, tts
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions

from parley.errors import StageTimeoutError
from pipeline.budget import ResponsePolicy
from tts.chunker import ChunkerConfig
from tts.stream import SpeechStream, StreamConfig

log = logging.getLogger("parley.tts")
_BOUNDARY = frozenset(".!?,;:")
_RELEASE_S = 0.04  # LLM deltas come every ~10-40 ms: a longer gap after a boundary ends the clause


class ParleyTTS(tts.TTS):
    """`time_left_s()` comes from the budget; `marks(name)` records first_chunk / tts_first_audio."""

    def __init__(self, synthesizer, *, sample_rate: int = 24_000, policy: ResponsePolicy | None = None,
                 time_left_s: Callable[[], float | None] = lambda: None,
                 marks: Callable[[str], None] = lambda _name: None, deadline_s: float | None = None) -> None:
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True), sample_rate=sample_rate, num_channels=1)
        if deadline_s is not None and deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        self.deadline_s = deadline_s  # the longest wait for the next frame once text is in
        self.synthesizer = synthesizer
        self.policy = policy or ResponsePolicy()
        self._time_left, self._marks = time_left_s, marks

    @property
    def model(self) -> str:
        return getattr(self.synthesizer, "name", "parley")

    @property
    def provider(self) -> str:
        return "parley"

    def stream_config(self, first_words: int) -> StreamConfig:
        return StreamConfig(sample_rate=self.sample_rate, chunker=ChunkerConfig(first_max_words=first_words))

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
                   ) -> tts.ChunkedStream:
        return ParleyChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> ParleySynthesizeStream:
        return ParleySynthesizeStream(tts=self, conn_options=conn_options)


async def _pump(speech: SpeechStream, emitter: tts.AudioEmitter, on_first: Callable[[], None],
                deadline_s: float | None) -> None:
    first = True
    frames = speech.__aiter__()
    while True:
        try:
            frame = await _next_frame(speech, frames, deadline_s)
        except StopAsyncIteration:
            break
        if first:
            on_first()
            first = False
        emitter.push(frame.pcm.tobytes())


async def _next_frame(speech: SpeechStream, frames, deadline_s: float | None):
    """The next frame. The deadline counts only while the synthesizer holds a chunk it has not
    spoken: a wait for the LLM's next words is the LLM's deadline (the real soak with 4 sessions
    on 2 cores waited >10 s for a clause once and was wrongly cut off as a TTS stall)."""
    step = asyncio.ensure_future(frames.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({step}, timeout=deadline_s)
            if done:
                return step.result()
            if any(c.synth_s == 0.0 for c in speech.metrics.chunks):  # a chunk stuck in the backend
                speech.cancel()
                log.error("tts stalled: no frame within %.2f s", deadline_s)
                raise StageTimeoutError("tts", deadline_s or 0.0, "audio frame")
    finally:
        if not step.done():
            step.cancel()


@contextlib.asynccontextmanager
async def _as_api_error():
    """livekit's TTS emits its "error" event (the session's apology) only for an APIError:
    any other failure (a backend's, a stall's StageTimeoutError) ended the reply in silence,
    with no event at all (found by tests/test_reliability_faults.py). Not retried: the same
    text would fail again."""
    try:
        yield
    except APIError:
        raise
    except Exception as e:
        raise APIError(f"{type(e).__name__}: {e}", retryable=False) from e


class _SpeaksAsAPIError:
    """Both stream kinds: run `_speak`, any failure turned into livekit's APIError."""

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        async with _as_api_error():
            await self._speak(output_emitter)


class ParleyChunkedStream(_SpeaksAsAPIError, tts.ChunkedStream):
    async def _speak(self, output_emitter: tts.AudioEmitter) -> None:
        plugin: ParleyTTS = self._tts  # type: ignore[assignment]
        output_emitter.initialize(request_id=uuid.uuid4().hex[:12], sample_rate=plugin.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", frame_size_ms=20)
        speech = SpeechStream(plugin.synthesizer, plugin.stream_config(plugin.policy.max_first_words))
        try:
            speech.say(self._input_text)
            await _pump(speech, output_emitter, lambda: None, plugin.deadline_s)
        finally:
            speech.close()
        output_emitter.flush()


class ParleySynthesizeStream(_SpeaksAsAPIError, tts.SynthesizeStream):
    async def _speak(self, output_emitter: tts.AudioEmitter) -> None:
        plugin: ParleyTTS = self._tts  # type: ignore[assignment]
        output_emitter.initialize(request_id=uuid.uuid4().hex[:12], sample_rate=plugin.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", frame_size_ms=20, stream=True)
        output_emitter.start_segment(segment_id=uuid.uuid4().hex[:12])
        first_text = asyncio.Event()
        speech: SpeechStream | None = None

        mark = {"chunked": False}

        async def forward() -> None:
            nonlocal speech
            inputs = self._input_ch.__aiter__()
            tail = ""
            nxt: asyncio.Future | None = None
            try:
                while True:
                    nxt = asyncio.ensure_future(inputs.__anext__())
                    # the chunker keeps "Okay." until the next character shows it is no "3.14":
                    # when the text pauses on a boundary, that character is not coming soon
                    wait = _RELEASE_S if speech is not None and tail[-1:] in _BOUNDARY else None
                    done, _ = await asyncio.wait({nxt}, timeout=wait)
                    if not done:
                        speech.push_text(" ")
                        tail = " "
                        self._note_chunk(plugin, speech, mark)
                    try:
                        data = await nxt
                    except StopAsyncIteration:
                        break
                    if isinstance(data, self._FlushSentinel) or not data:
                        continue
                    tail = data
                    if speech is None:  # sized now: the time left is known once the text starts
                        left = plugin._time_left()
                        speech = SpeechStream(plugin.synthesizer,
                                              plugin.stream_config(plugin.policy.first_words(left)))
                        first_text.set()
                        self._mark_started()
                    speech.push_text(data)
                    self._note_chunk(plugin, speech, mark)
            finally:
                if nxt is not None and not nxt.done():
                    nxt.cancel()
            if speech is not None:
                speech.end_input()
            first_text.set()

        def first_audio() -> None:
            if not mark["chunked"]:  # the chunk came out of end_input()'s flush
                plugin._marks("first_chunk")
            plugin._marks("tts_first_audio")

        forwarder = asyncio.create_task(forward())
        try:
            await first_text.wait()
            if speech is not None:
                await _pump(speech, output_emitter, first_audio, plugin.deadline_s)
            await forwarder
        finally:
            forwarder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await forwarder
            if speech is not None:
                speech.close()
        output_emitter.end_segment()

    @staticmethod
    def _note_chunk(plugin: ParleyTTS, speech: SpeechStream, mark: dict) -> None:
        if not mark["chunked"] and speech.metrics.chunks:  # the first speakable chunk is complete
            mark["chunked"] = True
            plugin._marks("first_chunk")
