"""One turn's worth of streaming decode state: the gated audio buffer, the stable prefix and
the policy of when to decode. Owned and driven by the transcriber's worker thread only; the
decodes it plans (`DecodeJob`) may run on other threads, their results come back in `apply`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from stt.agreement import HypothesisBuffer
from stt.config import TranscriberConfig
from stt.decoder import SAMPLE_RATE, WhisperDecoder
from stt.events import TranscriptEvent, Word, join_words
from stt.speech_gate import SpeechGate


@dataclass(eq=False)
class DecodeJob:
    """One planned decode. kind "interim": a growing buffer (LocalAgreement); "pause": speech
    stopped, all of it becomes stable; "final": the flush's own decode. A `tentative` pause
    decode starts at the first silent VAD window, before the pause is known to hold: it counts
    as a pause decode once `endpoint_silence_s` of silence (or the flush) confirms it, and as an
    interim if speech comes back first."""

    kind: str
    start: int  # buffer sample the decoded audio starts at
    n: int  # buffer length it covers
    speech_upto: int  # the utterance's speech end when planned
    audio: np.ndarray
    prompt: str
    beam: int
    words: list = field(default_factory=list)  # results, set by `run`
    dt: float = 0.0
    abandoned: bool = False  # its result will be thrown away (a later decode supersedes it)
    tentative: bool = False  # planned before the pause held
    settled: bool = True  # a tentative decode is settled once it is known to be a pause or an interim
    # the timeline (perf_counter wall times; stream time of the speech end it covers)
    speech_end_s: float = 0.0
    planned_wall: float = 0.0
    started_wall: float = 0.0
    ended_wall: float = 0.0
    stages: dict = field(default_factory=dict)  # encode_s, text_s (see WhisperDecoder.decode)
    # its words before their alignment (no times), when the decoder gave them (see `run`)
    text_words: list | None = None
    text_wall: float = 0.0
    # set by Utterance.preview: how many of its words say the stable words again (the rest
    # are new); its preflight went out before its alignment, so it must be applied as previewed
    skip: int | None = None
    # a greedy draft's words (no times) that came before `text_words` (WhisperDecoder on_draft)
    draft_words: list | None = None
    draft_wall: float = 0.0

    def run(self, decoder: WhisperDecoder, on_text: Callable[[DecodeJob], None] | None = None,
            on_draft: Callable[[DecodeJob], None] | None = None) -> DecodeJob:
        """Decode. `on_text(job)`: called on this thread once `text_words` is set (the words
        before their alignment); never when the decoder cannot give them early. `on_draft(job)`:
        called on the decoder's draft thread once `draft_words` is set, before `text_words`."""
        def text(words: list[Word]) -> None:
            self.text_words = [w.shifted(self.start / SAMPLE_RATE) for w in words]
            self.text_wall = time.perf_counter()
            on_text(self)

        def draft(words: list[Word]) -> None:
            self.draft_words = [w.shifted(self.start / SAMPLE_RATE) for w in words]
            self.draft_wall = time.perf_counter()
            on_draft(self)

        self.started_wall = time.perf_counter()
        words, self.dt = decoder.decode(self.audio, self.prompt, self.beam, stages=self.stages,
                                        cancelled=lambda: self.abandoned, on_text=None if on_text is None else text,
                                        on_draft=None if on_draft is None else draft)
        self.words = [w.shifted(self.start / SAMPLE_RATE) for w in words]
        self.ended_wall = time.perf_counter()
        return self


class Utterance:
    def __init__(self, config: TranscriberConfig, decoder: WhisperDecoder, gate: SpeechGate,
                 prompt: str = "", turn: int = 0) -> None:
        self.config, self.decoder, self.gate = config, decoder, gate
        self.prompt, self.turn = prompt, turn
        gate.new_turn()
        self.pieces: list[np.ndarray] = []
        self.n = 0  # samples in the buffer
        self.start = 0  # buffer sample where the next decode starts
        self.decoded_upto = 0  # buffer length covered by the last decode planned
        self.speech_upto = 0  # buffer length up to the end of the last speech chunk
        self.complete_upto = 0  # buffer length the pause / final decode applied last covered
        self.complete_planned = 0  # buffer length the pause / final decode planned last covers
        self.timemap: list[tuple[int, float]] = []  # (buffer sample, stream time) breakpoints
        self.hyp = HypothesisBuffer(config.commit_min_probability)
        self.stream_s = 0.0  # stream time of the newest audio seen
        self.push_wall = 0.0  # wall time the newest audio was pushed
        self.last_text = ""
        self.preflight_text = ""

    # -- audio in -----------------------------------------------------------------------
    def ingest(self, samples: np.ndarray, stream_t0: float, wall: float, probs: np.ndarray | None = None) -> None:
        self.stream_s, self.push_wall = stream_t0 + len(samples) / SAMPLE_RATE, wall
        kept = self.gate.feed(samples, probs)
        if self.gate.kept_speech_upto >= 0:
            self.speech_upto = self.n + self.gate.kept_speech_upto
        if not kept:
            return
        total = sum(len(k) for k in kept)
        # the kept audio ends (approximately, to the gate's 32 ms chunking) at stream_s
        t = self.stream_s - total / SAMPLE_RATE - self.gate.pending_samples / SAMPLE_RATE
        if not self.timemap or abs(self._stream_time(self.n) - t) > 1e-3:
            self.timemap.append((self.n, t))
        self.pieces.extend(kept)
        self.n += total

    def _stream_time(self, idx: int) -> float:
        base_i, base_t = 0, 0.0
        for i, t in self.timemap:
            if i > idx:
                break
            base_i, base_t = i, t
        return base_t + (idx - base_i) / SAMPLE_RATE

    def _to_stream(self, words: list[Word]) -> tuple[Word, ...]:
        out = []
        for w in words:
            s = self._stream_time(int(w.start * SAMPLE_RATE))
            out.append(Word(w.text, s, s + (w.end - w.start), w.probability, w.attached))
        return tuple(out)

    # -- decoding -----------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        """Speech stopped `endpoint_silence_s` ago (the gate's hysteresis, the session's VAD)."""
        return not self.gate.in_speech and self.gate.silence_s >= self.config.endpoint_silence_s

    def due(self) -> str | None:
        """The decode due now: "pause" once speech stopped (all of it decoded at once, ready
        for the flush; with `tentative_pause` from the first silent window on), "interim" after
        `interval_s` more speech, else None."""
        if self.speech_upto > self.complete_planned and (self.paused or (
                self.config.tentative_pause and self.gate.speech_seen and not self.gate.in_speech)):
            return "pause"
        if self.speech_upto > self.decoded_upto and self.n - self.decoded_upto >= self.config.interval_s * SAMPLE_RATE:
            return "interim"
        return None

    def covered(self, job: DecodeJob | None = None) -> bool:
        """All speech is in `job` (or in the pause / final decode applied last), with the
        silence after it: its words can be the final."""
        if job is not None:
            return job.kind != "interim" and job.n >= self.speech_upto
        return self.complete_upto >= self.speech_upto

    def plan(self, kind: str) -> DecodeJob:
        """The next decode: "interim" or "pause" (when due), "final" (at flush)."""
        start = self._final_start() if self._from_stable(kind) else self.start
        audio = np.concatenate(self.pieces)[start: self.n] if self.pieces else np.zeros(0, np.float32)
        stable_before = [w for w in self.hyp.committed if w.end <= start / SAMPLE_RATE + 0.05]
        prompt = " ".join(s for s in (self.prompt, join_words(stable_before)) if s)
        beam = self.config.beam_size if kind == "interim" else self.config.final_beam_size
        self.decoded_upto = self.n
        if kind != "interim":
            self.complete_planned = self.n
        return DecodeJob(kind, start, self.n, self.speech_upto, audio, prompt, beam,
                         tentative=kind == "pause" and not self.paused, settled=kind != "pause" or self.paused,
                         speech_end_s=self._stream_time(self.speech_upto), planned_wall=time.perf_counter())

    def _from_stable(self, kind: str) -> bool:
        """A final decode, and a pause decode with pause_from_stable or in a long buffer, start
        at the stable prefix (less `cut_context_s`): fewer tokens to decode."""
        c = self.config
        long = c.pause_from_stable_after_s is not None and (self.n - self.start) / SAMPLE_RATE >= c.pause_from_stable_after_s
        return kind == "final" or (kind == "pause" and (c.pause_from_stable or long))

    def apply(self, job: DecodeJob, push_wall: float | None = None) -> TranscriptEvent | None:
        """Take a finished decode's words; return an interim or preflight event when the text
        changed (none for a final decode: `finalize` makes that event)."""
        start = job.start
        if job.kind != "interim":
            # a finished stretch of speech: its decode is what flush would return, so it is
            # stable now (whisper_streaming's VAD-segment finish); see restart_at_pause
            skip = job.skip if job.skip is not None and _norms(job.words) == _norms(job.text_words) else None
            self.hyp.commit_all(job.words, start / SAMPLE_RATE, hold_end=job.kind == "pause", skip=skip)
            self.complete_upto = job.n
            if self.config.restart_at_pause:
                self.start = max(self.start, job.n)
            if job.kind == "final":
                return None
        else:
            self.hyp.insert(job.words, job.n / SAMPLE_RATE - self.config.commit_guard_s, start / SAMPLE_RATE)
            self._trim()
        return self._changed(self.hyp, job.kind == "pause", job.dt, push_wall)

    def preview(self, job: DecodeJob, push_wall: float | None = None) -> TranscriptEvent | None:
        """The preflight of a pause decode whose words are known (`job.text_words`) but not yet
        aligned: the event `apply` will make of them, sent a word alignment earlier. Only when
        their text alone says which of them are the stable words heard again: all the stable
        words the decode has audio of, in order, begin its words (else None, nothing changes,
        and `apply` aligns by time as always). Sets `job.skip`, which `apply` then follows:
        once sent, a preflight's stable text stays."""
        hyp = self._previewed(job, job.text_words)
        if hyp is None:
            return None
        job.skip = hyp[1]
        return self._changed(hyp[0], True, job.text_wall - job.started_wall, push_wall)

    def preview_draft(self, job: DecodeJob, push_wall: float | None = None) -> TranscriptEvent | None:
        """The preflight of a pause decode's greedy draft (`job.draft_words`), as `preview`
        makes of its words, while they have not come: nothing is committed or set by it, and
        a `preview` or `apply` whose text differs sends its own preflight after it."""
        if job.text_words is not None or job.skip is not None:
            return None
        hyp = self._previewed(job, job.draft_words)
        return None if hyp is None else self._changed(hyp[0], True, job.draft_wall - job.started_wall, push_wall)

    def _previewed(self, job: DecodeJob, words: list[Word] | None) -> tuple[HypothesisBuffer, int] | None:
        """(the hypothesis with a pause decode's unaligned `words` committed, how many of them
        say the stable words again), when their text alone says which those are."""
        if job.kind != "pause" or not words or job.skip is not None:
            return None
        from_s = job.start / SAMPLE_RATE
        stable = [w.norm for w in self.hyp.committed if w.end > from_s]
        if stable != _norms(words[:len(stable)]):
            return None
        hyp = self.hyp.copy()
        hyp.commit_all(words, from_s, hold_end=True, skip=len(stable))
        return hyp, len(stable)

    def _changed(self, hyp: HypothesisBuffer, pause: bool, dt: float,
                 push_wall: float | None) -> TranscriptEvent | None:
        """The interim or preflight event of `hyp` (after a pause decode: `pause`), None when
        its text did not change."""
        text = join_words(hyp.committed + hyp.tail)
        stable = join_words(hyp.committed)
        kind = "preflight" if pause and stable and not hyp.tail else "interim"
        if text == self.last_text and (kind == "interim" or stable == self.preflight_text):
            return None
        self.last_text = text
        if kind == "preflight":
            self.preflight_text = stable
        return self._event(kind, text, stable, hyp.committed + hyp.tail, dt,
                           time.perf_counter() - (self.push_wall if push_wall is None else push_wall))

    def step(self) -> TranscriptEvent | None:
        """Decode now if due (on this thread) and apply it: the synchronous path."""
        kind = self.due()
        if kind is None or (kind == "pause" and not self.paused):  # no tentative decodes here
            return None
        return self.apply(self.plan(kind).run(self.decoder))

    def _trim(self) -> None:
        c = self.config
        if (self.n - self.start) / SAMPLE_RATE > c.max_window_s - 1.0:
            # nothing stable for ~30 s: force the older half of the hypothesis to be stable,
            # cut before the word (or "$5" ".20" pieces) under the cut: a decode of audio
            # starting mid-word may not hear that word, and it would be lost
            tail, cut_s = self.hyp.tail, self.n / SAMPLE_RATE - c.max_window_s / 2
            k = next((i for i, w in enumerate(tail) if w.end > cut_s), len(tail))
            while 0 < k < len(tail) and tail[k].attached:
                k -= 1
            if k < len(tail):
                cut_s = min(cut_s, tail[k].start)
            self.hyp.commit(tail[:k])
            self.hyp.tail = tail[k:]
            self.start = max(self.start, int(cut_s * SAMPLE_RATE))
        elif (self.n - self.start) / SAMPLE_RATE > c.trim_s and self.hyp.committed:
            self.start = max(self.start, self._cut_sample())

    def _cut_sample(self) -> int:
        """Where the unstable audio begins: between the last stable word and the next one."""
        end = self.hyp.stable_end
        if self.hyp.tail:
            end = min(end, self.hyp.tail[0].start)
        return min(self.n, max(self.start, int(end * SAMPLE_RATE)))

    def _final_start(self) -> int:
        """Where a final decode starts: `cut_context_s` before the unstable audio (the words
        re-recognized there are aligned away, see agreement.py), or the buffer start."""
        if not (self.config.flush_from_stable and self.hyp.committed):
            return self.start
        return max(self.start, self._cut_sample() - int(self.config.cut_context_s * SAMPLE_RATE))

    def finish(self, requested_wall: float) -> TranscriptEvent:
        """Decode now if the applied decodes miss speech, then finalize: the synchronous path."""
        dt = 0.0
        if not self.covered():
            job = self.plan("final").run(self.decoder)
            self.apply(job)
            dt = job.dt
        return self.finalize(requested_wall, dt)

    def finalize(self, requested_wall: float, decode_s: float = 0.0) -> TranscriptEvent:
        """The final event, after the decode that covers all speech was applied (or none was
        needed): what is still unstable becomes stable."""
        self.hyp.commit(self.hyp.tail)
        self.hyp.tail = []
        self.hyp.release()
        words = self.hyp.committed
        text = join_words(words)
        return self._event("final", text, text, words, decode_s, time.perf_counter() - requested_wall)

    def _event(self, kind: str, text: str, stable: str, words: list[Word], dt: float,
               latency: float) -> TranscriptEvent:
        return TranscriptEvent(kind=kind, text=text, stable_text=stable, words=self._to_stream(words),
                               audio_time_s=self.stream_s, latency_s=latency, decode_s=dt, turn=self.turn)


def _norms(words: list[Word] | None) -> list[str]:
    return [w.norm for w in words or []]
