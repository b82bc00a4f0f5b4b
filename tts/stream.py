"""Streaming speech: text deltas in, 20 ms int16 PCM frames out, cancellable.

One worker thread per stream takes chunks from the chunker, synthesizes each (blocking model
call, off the caller's thread and off any event loop), fades the chunk's edges, resamples it
once to the output rate and cuts it into frames. Frames wait in a bounded queue
(`max_buffered_s`): the worker blocks when the reader lags, so a book-length text holds one
chunk plus that buffer in memory, never the whole reply.

`cancel()` and the reader share a lock: a frame leaves `read()` only if the stream was not
cancelled when the frame was handed out, so no frame is emitted after `cancel()` returns.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from parley.audio import Resampler, float_to_int16
from tts.chunker import ChunkerConfig, TextChunker
from tts.normalize import normalize_text
from tts.synthesizer import Synthesizer

OUTPUT_RATES = (8_000, 16_000, 22_050, 24_000, 44_100, 48_000)
_END = object()
_EMPTY = object()  # _read_ready: no frame queued yet
_POLL_S = 0.05  # how often blocked queue operations look at the cancel flag


@dataclass(frozen=True)
class StreamConfig:
    sample_rate: int = 16_000  # output rate
    frame_ms: int = 20
    max_buffered_s: float = 1.0  # synthesized audio allowed to wait for the reader
    fade_ms: float = 4.0  # raised-cosine fade at each chunk's edges: no click at the joins
    # Piper starts every chunk with 53-68 ms below -40 dB of its peak (five replies measured):
    # dead air the user waits through before the reply's first word, and a longer gap at each
    # join. A chunk's leading silence is cut to lead_ms before its first sample within
    # lead_floor_db of its peak (None: kept whole).
    lead_ms: float | None = 10.0
    lead_floor_db: float = -40.0
    # Piper also ends every chunk with 100-255 ms below -40 dB of its peak (12 chunks x 3 draws).
    # After a sentence or a comma that is the pause a speaker makes; after a chunk cut on a word
    # (a first chunk cut by its word count, a keep-up cut) it broke the sentence: "The capital"
    # | "of Australia" | "is Canberra." was heard with two ~150 ms holes. Such a chunk keeps
    # join_ms after its last sample within lead_floor_db of its peak (None: kept whole).
    join_ms: float | None = 40.0
    normalize: bool = True
    # Piper scales each sentence to a peak of exactly full scale; resampled to the output rate
    # that peak overshoots (up to 1.02 at 48 kHz on six replies) and the int16 conversion
    # clipped 0-3 samples a sentence. 0.9 (-0.9 dB) leaves room for the overshoot.
    gain: float = 0.9
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    # Keep-up: after the first chunk, chunks end at sentences (better prosody), but when the
    # words buffered so far would not be synthesized before the audio already made is played
    # out, with keep_up_s to spare, they go at once (TextChunker.take_words, at least
    # keep_up_min_words). Their synthesis is guessed from the stream's own real-time factor:
    # Piper took 0.21-0.25 s a second of speech on a busy 2-core Zen 1, so a fast LLM's 8-word
    # clause after a 2-word first chunk (~0.6 s of audio) came ~0.2-0.5 s late when a fixed
    # 0.35 s was held back for any chunk's synthesis. keep_up_s is the margin for the guesses'
    # errors (words of 0.27-0.5 s; a core taken by another stage). 0 turns it off.
    keep_up_s: float = 0.25
    keep_up_min_words: int = 2
    seconds_per_word: float = 0.35  # a chunk's length guessed before it is synthesized
    synth_rtf: float = 0.3  # synthesis seconds per second of speech until one was measured

    def __post_init__(self) -> None:
        if self.sample_rate not in OUTPUT_RATES:
            raise ValueError(f"sample_rate must be one of {OUTPUT_RATES}, got {self.sample_rate}")
        if self.frame_ms not in (10, 20, 30, 40):
            raise ValueError("frame_ms must be 10, 20, 30 or 40")
        if not 0.04 <= self.max_buffered_s <= 60:
            raise ValueError("max_buffered_s must be in [0.04, 60]")
        if not 0 <= self.fade_ms <= 50:
            raise ValueError("fade_ms must be in [0, 50]")
        if not 0 < self.gain <= 1:
            raise ValueError(f"gain must be in (0, 1], got {self.gain}")
        if not (self.lead_ms is None or 0 <= self.lead_ms <= 1000) or not -90 <= self.lead_floor_db < 0:
            raise ValueError("lead_ms must be None or in [0, 1000], lead_floor_db in [-90, 0)")
        if not (self.join_ms is None or 0 <= self.join_ms <= 1000):
            raise ValueError(f"join_ms must be None or in [0, 1000], got {self.join_ms}")
        if not 0 <= self.keep_up_s <= 10 or self.keep_up_min_words < 1 or not 0 < self.seconds_per_word <= 5:
            raise ValueError("keep_up_s must be in [0, 10], keep_up_min_words >= 1, seconds_per_word in (0, 5]")
        if not 0 <= self.synth_rtf <= 10:
            raise ValueError(f"synth_rtf must be in [0, 10], got {self.synth_rtf}")

    @property
    def frame_samples(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    @property
    def max_frames(self) -> int:
        return max(2, round(self.max_buffered_s * 1000 / self.frame_ms))


@dataclass(frozen=True)
class SpeechFrame:
    pcm: np.ndarray  # [frame_samples] int16 mono
    sample_rate: int
    timestamp_s: float  # stream time of the first sample
    chunk_index: int
    chunk_start: bool  # first frame of its chunk
    chunk_end: bool  # last frame of its chunk (zero-padded to a full frame)
    text: str  # the chunk's spoken text


@dataclass
class ChunkTiming:
    index: int
    text: str
    ready_s: float  # chunk complete in the chunker (since the first text delta)
    synth_s: float = 0.0  # backend seconds
    audio_s: float = 0.0
    first_frame_s: float | None = None  # its first frame queued (since the first text delta)
    estimate_s: float = 0.0  # its audio length guessed from its words, until synthesized


@dataclass
class StreamMetrics:
    chunks: list[ChunkTiming] = field(default_factory=list)
    first_frame_s: float | None = None  # first frame handed to the reader, since the first delta
    frames_emitted: int = 0
    # silence a real-time listener heard between chunks: a chunk synthesized after the audio
    # before it had played out (the stream's clock; playback assumed to start as frames are made)
    underrun_s: float = 0.0


class SpeechStream:
    """push_text()/end_input() from the producer; iterate (or read()) frames in the consumer."""

    def __init__(self, synthesizer: Synthesizer, config: StreamConfig,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """`clock`: the seconds the keep-up logic and the chunk timings read (a test's simulated
        clock makes them independent of how the threads are scheduled)."""
        self.synthesizer, self.config = synthesizer, config
        self._clock = clock
        self.metrics = StreamMetrics()
        self._chunker = TextChunker(config.chunker)
        self._text_q: queue.SimpleQueue = queue.SimpleQueue()  # chunks: text, small
        self._out_q: queue.Queue = queue.Queue(maxsize=config.max_frames)
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._input_ended = False
        self._done = False
        self._error: BaseException | None = None
        self._t0: float | None = None
        self._frames_made = 0  # worker side: frames queued so far (stream time of the next one)
        # keep-up: when the audio made so far ends playing (the clock; the reader takes frames
        # as they come and plays them in real time), and how many chunks were synthesized
        self._play_end = 0.0
        self._synthesized = 0
        self._synth_clock_s = self._audio_made_s = 0.0  # the stream's real-time factor, measured
        # One resampler for the stream, built here: its first construction imports scipy.signal
        # (~0.4 s measured), which must not land on the first chunk's latency. Each chunk ends
        # faded to zero and is flushed with zeros, so every chunk starts from a silent history.
        self._resampler = (Resampler(synthesizer.sample_rate, config.sample_rate)
                           if synthesizer.sample_rate != config.sample_rate else None)
        self._worker = threading.Thread(target=self._run, name="tts-stream", daemon=True)
        self._worker.start()

    # -- producer side ---------------------------------------------------------------
    def push_text(self, delta: str) -> None:
        """Add an LLM text delta. Ignored after cancel() (a barge-in races the producer)."""
        if self._cancelled.is_set():
            return
        if self._input_ended:
            raise RuntimeError("push_text after end_input")
        if self._t0 is None and delta:
            self._t0 = self._clock()
        for chunk in self._chunker.push(delta):
            self._enqueue(chunk)
        if self.config.keep_up_s > 0 and self.spare_s() < self.config.keep_up_s:
            for chunk in self._chunker.take_words(self.config.keep_up_min_words):
                self._enqueue(chunk)

    def spare_s(self) -> float:
        """Seconds the listener would still have left when the words buffered were synthesized
        after the chunks waiting, one after the other, each chunk playing once it is ready and
        the audio before it has played (negative: a gap they would hear)."""
        rtf, now = self.synth_rtf(), self._clock()
        ready, play = now, max(self._play_end, now)
        for c in self.metrics.chunks[self._synthesized:]:
            ready += rtf * c.estimate_s
            play = max(play, ready) + c.estimate_s
        return play - (ready + rtf * self._speech_s(self._chunker.buffered_words))

    def _speech_s(self, text: str) -> float:
        """Its spoken length, guessed from its words as spoken: "$5.20," is five of them (Piper
        took ~1.5 s over it, and the keep-up, counting one word, cut the next chunk too late)."""
        return len(normalize_text(text).split()) * self.config.seconds_per_word

    def synth_rtf(self) -> float:
        """Synthesis seconds per second of speech: this stream's own, else the backend's so far
        (its warm-up and earlier replies), else the configured guess."""
        if self._audio_made_s > 0:
            return self._synth_clock_s / self._audio_made_s
        return self.synthesizer.stats.rtf or self.config.synth_rtf

    def end_input(self) -> None:
        if self._input_ended:
            return
        self._input_ended = True
        for chunk in self._chunker.flush():
            self._enqueue(chunk)
        self._text_q.put(_END)

    def say(self, text: str) -> SpeechStream:
        """The whole text at once, then end of input."""
        self.push_text(text)
        self.end_input()
        return self

    def _enqueue(self, chunk: str) -> None:
        timing = ChunkTiming(len(self.metrics.chunks), chunk, self._since_t0(), estimate_s=self._speech_s(chunk))
        self.metrics.chunks.append(timing)
        self._text_q.put(timing)

    # -- control -----------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop synthesis and drop queued audio. No frame is emitted after this returns."""
        with self._lock:
            self._cancelled.set()
            self._drain()
        self._text_q.put(_END)
        self._put_end()

    def close(self) -> None:
        """End the stream's worker: cancels unless the speech already finished."""
        if not self._done:
            self.cancel()

    def __enter__(self) -> SpeechStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def join(self, timeout: float | None = None) -> None:
        self._worker.join(timeout)

    # -- consumer side ---------------------------------------------------------------
    def read(self, timeout: float | None = None) -> SpeechFrame | None:
        """The next frame; None at the end of the speech (or after cancel). Raises
        TimeoutError when no frame came within `timeout`, the worker's error if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._done or self._cancelled.is_set():
                return self._finish()
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("no audio frame within the timeout")
            try:
                item = self._out_q.get(timeout=wait)
            except queue.Empty:
                continue
            return self._take(item)

    def _read_ready(self) -> SpeechFrame | object | None:
        """`read` without waiting: a frame already queued, None at the end, _EMPTY when none is."""
        if self._done or self._cancelled.is_set():
            return self._finish()
        try:
            item = self._out_q.get_nowait()
        except queue.Empty:
            return _EMPTY
        return self._take(item)

    def _take(self, item) -> SpeechFrame | None:
        with self._lock:
            if self._cancelled.is_set():
                return None
            if item is _END:
                self._done = True
                return self._finish()
            self.metrics.frames_emitted += 1
            if self.metrics.first_frame_s is None:
                self.metrics.first_frame_s = self._since_t0()
            return item

    def __iter__(self) -> Iterator[SpeechFrame]:
        while (frame := self.read()) is not None:
            yield frame

    async def __aiter__(self) -> AsyncIterator[SpeechFrame]:
        """Frames without blocking the event loop: a frame already queued is taken on the loop,
        and only a wait for one runs in a thread (synthesis runs ahead of the reader, so most
        frames are queued: a thread hop for each of them was 50 a second of speech, each a
        wake-up of a default-executor thread on cores the stages share). Cancelling the
        consuming task cancels the stream, so no reader thread is left waiting."""
        try:
            while True:
                frame = self._read_ready()
                if frame is _EMPTY:
                    frame = await asyncio.to_thread(self.read)
                if frame is None:
                    return
                yield frame
        except asyncio.CancelledError:
            self.cancel()
            raise

    def _finish(self) -> None:
        if self._error is not None and not self._cancelled.is_set():
            raise self._error
        return None

    # -- worker ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._cancelled.is_set():
                item = self._text_q.get()
                if item is _END or self._cancelled.is_set():
                    break
                self._speak_chunk(item)
        except Exception as e:  # handed to the reader, which raises it
            self._error = e
        finally:
            self._put_end()

    def _speak_chunk(self, timing: ChunkTiming) -> None:
        text = normalize_text(timing.text) if self.config.normalize else timing.text
        start = self._clock()
        result = self.synthesizer.synthesize(text, normalize=False)
        mid_sentence = timing.text.rstrip()[-1:].isalnum()
        audio = trim_silence(result.audio, result.sample_rate, self.config.lead_floor_db, self.config.lead_ms,
                             self.config.join_ms if mid_sentence else None)
        timing.synth_s, timing.audio_s = result.metrics.seconds, len(audio) / result.sample_rate
        now = self._clock()
        if self._synthesized:
            self.metrics.underrun_s += max(0.0, now - self._play_end)
        self._play_end = max(self._play_end, now) + timing.audio_s
        if result.metrics.seconds > 0:  # a remembered phrase ("Okay.") says nothing of the backend's pace
            self._synth_clock_s += now - start
            self._audio_made_s += timing.audio_s
        self._synthesized += 1
        if self._cancelled.is_set() or not len(audio):
            return
        frames = self._to_frames(audio, result.sample_rate)  # [F, frame_samples] int16
        for i, pcm in enumerate(frames):
            frame = SpeechFrame(pcm, self.config.sample_rate, self._frames_made * self.config.frame_ms / 1000,
                                timing.index, i == 0, i == len(frames) - 1, result.text)
            if not self._put(frame):
                return
            self._frames_made += 1
            if i == 0:
                timing.first_frame_s = self._since_t0()

    def _to_frames(self, audio: np.ndarray, rate: int) -> np.ndarray:
        cfg = self.config
        audio = _fade(audio, round(rate * cfg.fade_ms / 1000)) * np.float32(cfg.gain)
        if self._resampler is not None:
            if rate != self._resampler.src_rate:
                raise ValueError(f"backend changed its rate from {self._resampler.src_rate} to {rate} Hz")
            rs = self._resampler
            # the zeros flush the filter's delay line (24 taps); the faded edge makes them silent
            audio = np.concatenate([rs.process(audio), rs.process(np.zeros(32, dtype=np.float32))])
        n = cfg.frame_samples
        pad = (-len(audio)) % n
        pcm = float_to_int16(np.concatenate([audio, np.zeros(pad, dtype=np.float32)]))
        return pcm.reshape(-1, n)  # [F, n]

    def _put(self, item) -> bool:
        while not self._cancelled.is_set():
            try:
                self._out_q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _put_end(self) -> None:
        try:
            self._out_q.put_nowait(_END)
        except queue.Full:
            if not self._cancelled.is_set():
                self._put(_END)

    def _drain(self) -> None:
        while True:
            try:
                self._out_q.get_nowait()
            except queue.Empty:
                return

    def _since_t0(self) -> float:
        return self._clock() - self._t0 if self._t0 is not None else 0.0


def trim_silence(audio: np.ndarray, rate: int, floor_db: float, lead_ms: float | None,
                 tail_ms: float | None = None) -> np.ndarray:
    """audio [N] from `lead_ms` before its first sample within `floor_db` of the peak to
    `tail_ms` after its last one (relative, so a quiet backend is cut as a loud one is); a side
    whose keep is None is not cut. All-silent audio: unchanged."""
    peak = float(np.max(np.abs(audio))) if len(audio) else 0.0
    if (lead_ms is None and tail_ms is None) or peak <= 0.0:
        return audio
    loud = np.abs(audio) >= peak * 10 ** (floor_db / 20)
    start, end = 0, len(audio)
    if lead_ms is not None:
        start = max(0, int(np.argmax(loud)) - round(rate * lead_ms / 1000))
    if tail_ms is not None:
        end = min(len(audio), len(audio) - int(np.argmax(loud[::-1])) + round(rate * tail_ms / 1000))
    return audio[start:end]


def _fade(audio: np.ndarray, n: int) -> np.ndarray:  # [N] float32
    if n <= 0 or len(audio) < 2 * n:
        return audio
    ramp = (0.5 - 0.5 * np.cos(np.linspace(0, np.pi, n, dtype=np.float32))).astype(np.float32)
    out = audio.copy()
    out[:n] *= ramp
    out[-n:] *= ramp[::-1]
    return out
