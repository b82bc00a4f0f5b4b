"""The session's ears: one Silero pass per 32 ms window, shared by VAD events, the STT's
speech gate and the end-of-turn detector, and the turn's end decided by our detector.

All model work (resampling, Silero, the detector's features) runs in one worker thread the
Hearing owns; the transcriber decodes in its own thread. `push()` only queues, so the event
loop never waits on a model. Events cross back to the loop with call_soon_threadsafe.

    pushed frame (any rate, int16) ─► Resampler ─► 512-sample windows ─► Silero P (once)
        ├─► VAD hysteresis ─► speech_start / speech_end / vad (inference) events
        ├─► StreamingTranscriber.push(speech_probs=P) ─► interim / preflight ─► push_transcript
        └─► EndOfTurnStream.push(speech_probs=P) ─► EndOfTurn ─► transcriber flush ─► final
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parley.audio import ENGINE_RATE, Resampler
from parley.errors import StageOutputError, StageTimeoutError
from stt.events import TranscriptEvent
from turn_detection.vad import WINDOW, WINDOW_S, SileroVAD, VADConfig

log = logging.getLogger("parley.hearing")
_CLOSE = object()
_FLUSH = object()
_POLL_S = 0.02  # how often the worker looks for transcriber events when no audio comes


@dataclass(frozen=True)
class HearingEvent:
    kind: str  # speech_start | speech_end | vad | interim | preflight | end_of_turn | final | error
    t: float  # monotonic time the event refers to (speech_end: when the last speech was heard)
    text: str = ""
    probability: float = 0.0  # vad: P(speech) of the newest window; end_of_turn: P(finished)
    speaking: bool = False
    speech_s: float = 0.0  # vad: speech in the current run; silence_s: silence since it
    silence_s: float = 0.0
    turn: int = 0
    error: BaseException | None = None


class Hearing:
    """Thread-safe push(); events to every subscriber on the loop given to start()."""

    def __init__(self, vad: SileroVAD, transcriber, eot_detector, *, vad_config: VADConfig | None = None,
                 final_deadline_s: float = 2.5, new_transcriber: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if final_deadline_s <= 0:
            raise ValueError(f"final_deadline_s must be positive, got {final_deadline_s}")
        self._vad = vad
        # speech ends after 0.1 s of silence: before our detector decides (>= 0.1 s), so
        # livekit's user state follows the VAD, and the STT can start its end decode then
        self._vad_stream = vad.stream(vad_config or VADConfig(min_silence_s=0.1))
        self.transcriber = transcriber
        # A transcriber whose push or poll raised is replaced by a new one (its worker may be
        # dead); the new one is fed from the next VAD window boundary, so the shared Silero
        # probabilities stay aligned with its windows.
        self._new_transcriber = new_transcriber
        self._heard = 0  # 16 kHz samples heard: VAD windows count from the first
        self._stt_skip = 0  # samples to hold back from a new transcriber, up to a window boundary
        self._prompt = ""
        self._eot = eot_detector.stream()
        self._text_scorer = getattr(eot_detector, "text_scorer", None)  # closed with the hearing
        self._clock = clock
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._subscribers: list[asyncio.Queue] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._resampler: Resampler | None = None
        self._rate: int | None = None
        self._pending = np.zeros(0, np.float32)
        self._vad_state, self._vad_ctx = vad.new_state()
        self._turn = 0
        self._speech_start_t: float | None = None
        self._last_speech_t = 0.0  # monotonic end of the newest window heard as speech
        self._speech_run_s = 0.0
        self._silence_s = 0.0
        self._closed = False
        self._flushing = None  # the transcriber's pending flush (a Future)
        self._deferred: list[int] = []  # turns whose flush waits for the previous one
        # The final transcript's deadline. Past it the turn is answered from the newest words
        # heard (interim / preflight), or apologized for when there were none, and the
        # transcriber is reset: a stalled decoder never leaves the user unanswered.
        self.final_deadline_s = final_deadline_s
        self._flush_due = 0.0  # monotonic deadline of the pending flush
        self._flush_turn = 0
        self._flush_owner = transcriber
        self._flush_fallback = ""  # the newest words of the turn being flushed
        self._words = ""  # the newest interim / preflight text of the current turn
        self._final_lock = threading.Lock()  # one outcome per flush: its final or its timeout

    # -- loop side --------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._thread is not None:
            return
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="parley-hearing", daemon=True)
        self._thread.start()

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        if q in self._subscribers:
            self._subscribers.remove(q)

    def push(self, pcm: np.ndarray, sample_rate: int) -> None:
        """int16 mono [N] at any rate (checked by the caller's transport); never blocks."""
        if not self._closed:
            self._inbox.put((pcm, int(sample_rate), self._clock()))

    def set_context(self, previous_turns_text: str) -> None:
        """Earlier turns' text, given to Whisper as context for the next decodes."""
        self._prompt = previous_turns_text
        self.transcriber.set_prompt(previous_turns_text)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_CLOSE)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.transcriber.close()
        close_scorer = getattr(self._text_scorer, "close", None)
        if close_scorer is not None:
            close_scorer()

    def _emit(self, event: HearingEvent) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        for q in list(self._subscribers):
            loop.call_soon_threadsafe(q.put_nowait, event)

    # -- worker side ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                item = self._inbox.get(timeout=_POLL_S)
            except queue.Empty:
                item = None
            if item is _CLOSE:
                return
            try:
                if item is _FLUSH:
                    if self._deferred and (self._flushing is None or self._flushing.done()):
                        self._flush(self._deferred.pop(0))
                elif item is not None:
                    self._hear(*item)
                self._poll_transcriber()
                self._check_final_deadline()
            except Exception as e:  # a failed stage must reach the session, not kill the thread
                log.exception("hearing failed")
                self._emit(HearingEvent("error", self._clock(), text=str(e), error=e))

    def _to_16k(self, pcm: np.ndarray, rate: int) -> np.ndarray:
        x = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)
        if rate == ENGINE_RATE:
            return x
        if self._resampler is None or self._rate != rate:
            self._resampler, self._rate = Resampler(rate, ENGINE_RATE), rate
        return self._resampler.process(x)

    def _hear(self, pcm: np.ndarray, rate: int, arrived: float) -> None:
        x = self._to_16k(pcm, rate)
        if len(x) == 0:
            return
        buf = np.concatenate([self._pending, x]) if len(self._pending) else x
        n = len(buf) // WINDOW
        self._pending = buf[n * WINDOW:].copy()
        probs: list[float] = []
        off = self._vad_stream.config.off_threshold
        for i in range(n):
            window = buf[i * WINDOW:(i + 1) * WINDOW]
            p, self._vad_state, self._vad_ctx = self._vad.window_probability(window, self._vad_state, self._vad_ctx)
            probs.append(p)
            # monotonic time this window's last sample was heard: its arrival minus what followed it
            t_end = arrived - (len(buf) - (i + 1) * WINDOW) / ENGINE_RATE
            if p >= off:
                self._last_speech_t = t_end
                self._speech_run_s += WINDOW_S
                self._silence_s = 0.0
            else:
                self._silence_s += WINDOW_S
            self._vad_event(self._vad_stream.push_probability(p), t_end, p)
        self._feed_transcriber(x, probs)
        eot = self._eot.push(x, speech_probs=probs)
        if probs:
            self._emit(HearingEvent("vad", arrived, probability=probs[-1], speaking=self._vad_stream.speaking,
                                    speech_s=self._speech_run_s, silence_s=self._silence_s, turn=self._turn))
        if eot is not None:
            self._end_of_turn(eot.probability)

    def _feed_transcriber(self, x: np.ndarray, probs: list[float]) -> None:
        self._heard += len(x)
        if self._stt_skip:  # a new transcriber starts at the next window boundary B
            cut = min(self._stt_skip, len(x))
            drop = 1 if cut == self._stt_skip else 0  # the window ending at B is not its own
            self._stt_skip -= cut
            x, probs = x[cut:], probs[drop:]
            if len(x) == 0:
                return
        try:
            events = self.transcriber.push(x, ENGINE_RATE, speech_probs=probs)
        except Exception as e:
            self._transcriber_failed(e)
            return
        self._transcripts(events)

    def _poll_transcriber(self) -> None:
        try:
            events = self.transcriber.poll()
        except Exception as e:
            self._transcriber_failed(e)
            return
        self._transcripts(events)

    def _transcriber_failed(self, error: Exception) -> None:
        log.error("the transcriber failed: %r", error)
        self._emit(HearingEvent("error", self._clock(), text=str(error), error=error))
        if self._new_transcriber is None:
            return
        old, self.transcriber = self.transcriber, self._new_transcriber()
        self.transcriber.set_prompt(self._prompt)
        self._stt_skip = (-self._heard) % WINDOW
        threading.Thread(target=old.close, name="parley-stt-close", daemon=True).start()

    def _vad_event(self, ev, t_end: float, p: float) -> None:
        if ev is None:
            return
        if ev.kind == "start":
            self._speech_start_t = t_end - (self._vad_stream.time_s - ev.time_s)
            self._speech_run_s = max(self._speech_run_s, WINDOW_S)
            self._emit(HearingEvent("speech_start", self._speech_start_t, probability=p, speaking=True,
                                    turn=self._turn))
        else:
            self._speech_run_s = 0.0
            self._emit(HearingEvent("speech_end", self._last_speech_t, probability=p, turn=self._turn))

    def _transcripts(self, events) -> None:
        flushing = self._flushing is not None and not self._flushing.done()
        for ev in events:
            if not isinstance(ev, TranscriptEvent):
                raise StageOutputError(f"stt: a transcript event of type {type(ev).__name__}")
            if flushing:
                # words of the turn being finalized, arriving late: the final supersedes them,
                # but a preflight still goes out, so a reply can start on it before the final
                # (the pause decode's word alignment, ~65 ms of one Zen 1 core, and with
                # draft_preflight its beam search): the turn ended before its words came
                if ev.kind == "preflight" and ev.text:
                    self._emit(HearingEvent("preflight", self._clock(), text=ev.text, turn=self._flush_turn))
                continue
            if ev.kind in ("interim", "preflight") and ev.text:
                self._words = ev.text
                self._eot.push_transcript(ev.text)
                self._emit(HearingEvent(ev.kind, self._clock(), text=ev.text, turn=self._turn))

    def _end_of_turn(self, probability: float) -> None:
        turn, decided = self._turn, self._clock()
        self._turn += 1
        speech_end = self._last_speech_t
        self._emit(HearingEvent("end_of_turn", decided, probability=probability, turn=turn,
                                silence_s=decided - speech_end))
        if self._flushing is not None and not self._flushing.done():
            # the previous turn's final is still being decoded: a flush now would hand back that
            # same final, and this turn's words would be lost; flush once it is out
            self._deferred.append(turn)
            return
        self._flush(turn)

    def _flush(self, turn: int) -> None:
        self._flush_due, self._flush_turn = self._clock() + self.final_deadline_s, turn
        self._flush_owner = self.transcriber
        self._flush_fallback, self._words = self._words, ""
        future = self._flushing = self.transcriber.flush_future()

        def done(f) -> None:  # on the transcriber's thread
            with self._final_lock:
                if f is not self._flushing or f.cancelled():
                    return  # timed out (and reset) already: the late final is dropped
                self._flushing = None
            if f.exception() is not None:
                self._emit(HearingEvent("error", self._clock(), text=str(f.exception()), error=f.exception()))
                return
            self._emit(HearingEvent("final", self._clock(), text=f.result().text, turn=turn))
            if self._deferred:
                self._inbox.put(_FLUSH)  # let the worker flush

        future.add_done_callback(done)

    def _check_final_deadline(self) -> None:
        """Worker: the pending final is past its deadline -> answer the words heard, or apologize."""
        with self._final_lock:
            if self._flushing is None or self._clock() < self._flush_due:
                return
            self._flushing = None
        error = StageTimeoutError("stt", self.final_deadline_s, "final transcript")
        self._flush_owner.reset()  # cancels the stalled flush and drops the turn's decodes
        now = self._clock()
        if self._flush_fallback:
            log.warning("%s: answering the newest interim words instead", error)
            self._emit(HearingEvent("final", now, text=self._flush_fallback, turn=self._flush_turn))
        else:
            log.warning("%s and no words heard", error)
            self._emit(HearingEvent("error", now, text=str(error), error=error))
        if self._deferred:
            self._flush(self._deferred.pop(0))

    @property
    def last_speech_t(self) -> float:
        return self._last_speech_t
