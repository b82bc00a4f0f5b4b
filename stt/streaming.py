"""StreamingTranscriber: push audio as it arrives, get interim/preflight events, flush for the
final. All model work runs in one worker thread the transcriber owns; push() only queues."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from parley.audio import AudioFrame, validate_audio
from stt.config import TranscriberConfig
from stt.decoder import SAMPLE_RATE, WhisperDecoder
from stt.events import TranscriptEvent
from stt.speech_gate import SpeechGate, check_speech_probs
from stt.utterance import DecodeJob, Utterance


class StreamingTranscriber:
    """Thread-safe. One utterance (turn) at a time: flush() ends it, reset() drops it."""

    def __init__(self, config: TranscriberConfig | None = None, *, decoder: WhisperDecoder | None = None,
                 prompt: str = "", on_decode: Callable[[DecodeJob], None] | None = None) -> None:
        """`on_decode`: called on a decode thread with every finished decode (abandoned ones
        too), its timeline filled in (the per-turn timeline of benchmarks/stt.py); it must not block."""
        self.config = config or TranscriberConfig()
        self._on_decode = on_decode
        self._decoder = decoder or WhisperDecoder(self.config)
        self._gate = SpeechGate(self.config.vad_threshold, self.config.vad_neg_threshold,
                                self.config.speech_pad_s)
        self._cond = threading.Condition()
        self._inbox: list[tuple[np.ndarray, float, float, np.ndarray | None]] = []  # (samples, t0, wall, probs)
        self._dropped: list[tuple[np.ndarray, float, float, np.ndarray | None]] = []  # reset: gate only
        self._pushed = 0  # 16 kHz samples ever pushed: the VAD windows count from the first
        self._outbox: list[TranscriptEvent] = []
        self._flush: tuple[Future, float] | None = None
        self._reset_to: int | None = None
        self._prompt = prompt
        self._turn = 0
        self._clock = 0.0  # stream time of the next pushed sample
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._pool = ThreadPoolExecutor(self.config.decode_workers, thread_name_prefix="stt-decode")
        self._running: list[DecodeJob] = []  # decodes in flight, abandoned ones included
        self._done: list[tuple[DecodeJob, BaseException | None]] = []
        self._texts: list[DecodeJob] = []  # decodes whose words came before their alignment
        self._drafted: list[DecodeJob] = []  # decodes whose greedy draft's words came before theirs
        self._live: list[DecodeJob] = []  # worker only: this utterance's decodes whose result counts
        self._held: list[DecodeJob] = []  # worker only: finished, not yet applied (tentative ones wait)
        self._waiting_text: list[DecodeJob] = []  # worker only: words came early, not yet previewed
        self._waiting_draft: list[DecodeJob] = []  # worker only: the same for drafts
        # worker only: the decode the flush waits for (the one the final will be, or a previewed one)
        self._flush_waits_for: DecodeJob | None = None
        self._final_decode_s = 0.0  # worker only: decode time of this turn's "final" decodes
        self._utt = Utterance(self.config, self._decoder, self._gate, prompt, 0)
        self._thread = threading.Thread(target=self._run, name="stt-worker", daemon=True)
        self._thread.start()

    # -- caller side ----------------------------------------------------------------------
    def push(self, audio: np.ndarray | AudioFrame, sample_rate: int = SAMPLE_RATE, *,
             speech_probs: Sequence[float] | None = None) -> list[TranscriptEvent]:
        """Queue audio (any size; other rates / stereo converted). Returns events ready now.

        `speech_probs`: the session's VAD probabilities, one per 512-sample 16 kHz window this
        push completes, windows counted over everything ever pushed here (reset and flush do
        not move them; other rates count after conversion). The speech gate then uses them
        instead of its own Silero model. A wrong count raises AudioFormatError (a ValueError)
        and queues nothing."""
        if isinstance(audio, AudioFrame):
            samples = validate_audio(audio.samples, audio.sample_rate)
            t0 = audio.timestamp_s
        else:
            samples = validate_audio(audio, sample_rate)
            t0 = None
        with self._cond:
            self._raise_if_failed()
            probs = None if speech_probs is None else check_speech_probs(speech_probs, self._pushed, len(samples))
            self._pushed += len(samples)
            t0 = self._clock if t0 is None else t0
            self._clock = t0 + len(samples) / SAMPLE_RATE
            self._inbox.append((samples, t0, time.perf_counter(), probs))
            self._cond.notify_all()
            return self._take_events()

    def poll(self) -> list[TranscriptEvent]:
        with self._cond:
            self._raise_if_failed()
            return self._take_events()

    def set_prompt(self, previous_turns_text: str) -> None:
        """Text of the previous turns, given to Whisper as context from the next decode on."""
        with self._cond:
            self._prompt = previous_turns_text or ""

    def flush_future(self) -> Future:
        """End the turn: a Future of the final event (asyncio: asyncio.wrap_future)."""
        with self._cond:
            self._raise_if_failed()
            if self._flush is None:
                self._flush = (Future(), time.perf_counter())
                self._cond.notify_all()
            return self._flush[0]

    def flush(self, timeout: float | None = None) -> TranscriptEvent:
        """End the turn and return its final transcript (blocks until it is decoded)."""
        return self.flush_future().result(timeout)

    async def aflush(self) -> TranscriptEvent:
        return await asyncio.wrap_future(self.flush_future())

    def reset(self) -> None:
        """Drop the current turn (queued audio, pending events and a pending flush)."""
        with self._cond:
            self._dropped.extend(self._inbox)  # the gate still sees it: windows stay aligned
            self._inbox.clear()
            self._outbox.clear()
            if self._flush is not None:
                self._flush[0].cancel()
                self._flush = None
            self._turn += 1
            self._reset_to = self._turn
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until all queued audio is processed (for offline replay and tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._error is not None or self._closed or (
                not self._inbox and not self._busy and self._flush is None and not self._running
                and not self._done), timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def __enter__(self) -> StreamingTranscriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _take_events(self) -> list[TranscriptEvent]:
        out, self._outbox = self._outbox, []
        return out

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the transcriber's worker failed: {self._error!r}") from self._error

    # -- worker side ----------------------------------------------------------------------
    # The worker thread owns the utterance and plans decodes; they run on `decode_workers`
    # threads (one CTranslate2 replica each), so the worker keeps ingesting audio and answers
    # a flush while a decode runs: a flush takes a pause decode in flight that covers all the
    # speech, and never waits for one that does not (that one is abandoned, and the flush's
    # own decode starts at once on the other replica). A pause decode's words come to the
    # worker before their word alignment; its preflight goes out then (`_preview`).
    def _run(self) -> None:
        try:
            while self._work_once():
                pass
        except Exception as e:  # surfaced to the caller on its next call
            with self._cond:
                self._error = e
                if self._flush is not None:
                    self._flush[0].set_exception(e)
                    self._flush = None
                self._cond.notify_all()
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _decode_due(self) -> bool:
        if self._flush is not None or self._previewing():
            return False
        kind = self._utt.due()
        if kind == "interim":  # interims only on an idle model: they are never worth a wait
            return not self._running
        return kind == "pause" and len(self._running) < self.config.decode_workers

    def _work_once(self) -> bool:
        with self._cond:
            self._busy = False
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._closed or self._inbox or self._dropped or self._done or self._texts
                                or self._drafted
                                or self._reset_to is not None or self._decode_due()
                                or (self._flush is not None and self._flush_waits_for is None))
            if self._closed:
                return False
            self._busy = True
            if self._reset_to is not None:
                self._new_utterance(self._reset_to)
                self._reset_to = None
            dropped, self._dropped = self._dropped, []
            chunks, self._inbox = self._inbox, []
            done, self._done = self._done, []
            texted, self._texts = self._texts, []
            drafted, self._drafted = self._drafted, []
            flush, turn = self._flush, self._utt.turn
            self._utt.prompt = self._prompt
        for samples, _t0, _wall, probs in dropped:
            self._gate.feed(samples, probs, keep=False)
        for samples, t0, wall, probs in chunks:
            self._utt.ingest(samples, t0, wall, probs)
        self._settle_tentative(confirm=flush is not None)
        for job, error in done:
            if error is not None:
                raise error
            if job in self._live:  # not abandoned, this utterance's
                self._held.append(job)
        for job in [j for j in self._held if j.settled]:  # settled: pause or interim
            self._held.remove(job)
            if job in self._live:
                self._apply(job, turn)
        self._preview(texted, drafted, turn)
        if flush is not None:
            self._advance_flush(flush)
        elif (kind := self._utt.due()) is not None:
            if self._decode_due():
                self._start(kind)
            elif kind == "pause":
                # no free replica: the interims on them (a tentative decode that speech made an
                # interim among them) are given up now, so they stop after their encoder and the
                # pause decode starts then. Waiting for them to end made a flush 250 ms after
                # "... corner shop." ("shop" = silent closure, burst) find no decode covering the
                # speech and decode anew: 1233 ms after the flush on the shared machine
                self._abandon(lambda j: j.kind == "interim")
        return True

    def _apply(self, job: DecodeJob, turn: int) -> None:
        self._live.remove(job)
        event = self._utt.apply(job)
        if job.kind == "final":
            self._final_decode_s += job.dt  # model time the flush itself caused
        if job is self._flush_waits_for:
            self._flush_waits_for = None
        with self._cond:
            if event is not None and self._turn == turn:
                self._outbox.append(event)

    def _previewing(self) -> bool:
        """A pause decode's preflight went out before its alignment, which is still running:
        nothing is planned or abandoned until it is applied (for the next decode's prompt and
        cut, the stable words need their times), ~65 ms on one core."""
        return any(j.skip is not None for j in self._live)

    def _preview(self, texted: list[DecodeJob], drafted: list[DecodeJob], turn: int) -> None:
        """Send the preflight of each pause decode whose words came before their alignment, or
        whose greedy draft's words came before those (tentative ones once they count as pause
        decodes; the rest when they end, as always)."""
        self._waiting_text = [j for j in self._waiting_text + texted if j in self._live and j.skip is None]
        self._waiting_draft = [j for j in self._waiting_draft + drafted
                               if j in self._live and j.skip is None and j.text_words is None]
        for waiting, preview in ((self._waiting_text, self._utt.preview),
                                 (self._waiting_draft, self._utt.preview_draft)):
            for job in [j for j in waiting if j.settled]:
                waiting.remove(job)
                event = preview(job)
                with self._cond:
                    if event is not None and self._turn == turn:
                        self._outbox.append(event)

    def _settle_tentative(self, confirm: bool) -> None:
        """A tentative pause decode becomes a pause decode once the pause holds (or the turn
        ends: `confirm`), an interim once speech comes back before that."""
        for job in self._live:
            if job.settled:
                continue
            if self._utt.speech_upto > job.speech_upto:
                job.kind, job.settled = "interim", True
            elif confirm or self._utt.paused:
                job.settled = True

    def _start(self, kind: str) -> DecodeJob:
        if kind != "interim":  # a complete decode supersedes the interims in flight
            self._abandon(lambda j: True)
        job = self._utt.plan(kind)
        self._live.append(job)
        with self._cond:
            self._running.append(job)
        self._pool.submit(self._decode, job)
        return job

    def _decode(self, job: DecodeJob) -> None:  # on a decode thread
        error = None
        try:
            early = self.config.early_preflight and job.kind == "pause"  # only a pause decode previews
            draft = early and self.config.draft_preflight
            job.run(self._decoder, on_text=self._text_ready if early else None,
                    on_draft=self._draft_ready if draft else None)
            if self._on_decode is not None:
                self._on_decode(job)
        except Exception as e:  # handed to the worker, which fails the transcriber
            error = e
        with self._cond:
            self._running.remove(job)
            self._done.append((job, error))
            self._cond.notify_all()

    def _text_ready(self, job: DecodeJob) -> None:  # on a decode thread, before the alignment
        with self._cond:
            self._texts.append(job)
            self._cond.notify_all()

    def _draft_ready(self, job: DecodeJob) -> None:  # on the decoder's draft thread
        with self._cond:
            self._drafted.append(job)
            self._cond.notify_all()

    def _abandon(self, which, previewed: bool = False) -> None:
        """Give up the live decodes `which` picks; a previewed one only with `previewed`."""
        for job in [j for j in self._live if which(j) and (previewed or j.skip is None)]:
            job.abandoned = True
            self._live.remove(job)

    def _advance_flush(self, flush: tuple[Future, float]) -> None:
        utt = self._utt
        if self._flush_waits_for is not None:
            return
        covering = next((j for j in self._live if utt.covered(j)), None)
        previewed = next((j for j in self._live if j.skip is not None and j is not covering), None)
        if previewed is not None:  # its words go before what the flush decides: wait for them
            self._flush_waits_for = previewed
            return
        if covering is not None:  # a pause (or the final) decode in flight has all the speech
            self._abandon(lambda j: j is not covering)
            self._flush_waits_for = covering
            return
        if not utt.covered():  # speech no decode covers: decode it now, abandoning the rest
            self._flush_waits_for = self._start("final")
            return
        event = utt.finalize(flush[1], self._final_decode_s)
        self._finish_turn(flush, event)

    def _new_utterance(self, turn: int) -> None:
        self._abandon(lambda j: True, previewed=True)
        self._held.clear()
        self._waiting_text.clear()
        self._waiting_draft.clear()
        self._flush_waits_for = None
        self._final_decode_s = 0.0
        self._utt = Utterance(self.config, self._decoder, self._gate, self._prompt, turn)

    def _finish_turn(self, flush: tuple[Future, float], event: TranscriptEvent) -> None:
        with self._cond:
            if self._flush is not flush:  # reset() cancelled it meanwhile
                return
            self._flush = None
            # what this turn's decodes said before its final (a pause decode's preflight) is
            # superseded by it: polled after it, it would read as the next turn's words
            self._outbox = [e for e in self._outbox if e.turn != self._turn]
            self._turn += 1
            self._new_utterance(self._turn)
            flush[0].set_result(event)
            self._cond.notify_all()
