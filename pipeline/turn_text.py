"""The voice LLM as the turn detector's text witness: P(the user's words so far end their turn).

The detector's own text scorer (turn_detection.completeness) reads the last few words; it knows
that "to" ends no turn, but not that "What is the capital of Australia" is a whole question (it
scored 0.29). The LLM knows. With the chat so far (the system prompt and earlier turns, cached)
and the user's words as an unfinished user message, P(next token ends a sentence or the
message) is high after a whole request and low inside one, whoever speaks it. Whisper's trailing
punctuation is stripped first: it puts a "." or "..." after prefixes at pauses as well as after
turns, so the model, not the STT, decides where the sentence ends. With a probe
(pipeline.turn_probe, fit for the embedded model) P is read from the same request's final
hidden state instead: the raw P is calibrated for written chat and gives whole spoken
commands 0.2-0.45.

One short prefill-only engine request per new transcript at a pause (LLMEngine.score_prompt);
when the engine cannot answer within `timeout_s` (busy with a long reply, or no room), the
detector's own scorer answers instead, so a turn is never held up. The session asks it through
a BackgroundScorer, on a thread of its own: the hearing thread (Silero, the STT's feed, the
detector) never waits on the engine."""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pipeline.turn_probe import TextProbe

log = logging.getLogger("parley.turn_text")
_TRAILING = re.compile(r"[\s.,;:!?\u2026-]+$")
# Whisper writes "30%" where the user said "thirty percent": after "%" the LLM expects " of" or
# " to" (P(end) 0.02 for "Turn the living room lights down to 30%", 0.28 with " percent")
_PERCENT = re.compile(r"\s*%")
END_MARKS = (".", "?", "!", "...")


def without_end_punctuation(text: str) -> str:
    """The user's words without the punctuation Whisper ended them with. That mark is a guess,
    and a late one: a pause decode holds it back until the final (stt.agreement), so the
    preemptive reply was asked with "... on Saturday" while the history kept "... on
    Saturday?". Every prompt of the engine spells a user message this way (the witness's
    score, the prefill ahead, the reply, the next turn's history), so they share its tokens and
    the next turn's prompt hits the prefix cache through the previous reply: with the mark,
    it missed from that message on and prefilled the whole reply again (~100 tokens, ~0.8 s
    of one Zen 1 core, while the user spoke)."""
    return _TRAILING.sub("", text.strip())


class TextScorer(Protocol):
    def probability(self, text: str) -> float: ...


class EngineCompletenessScorer:
    def __init__(self, engine: Any, fallback: TextScorer,
                 context: Callable[[], list[dict[str, Any]]] | None = None, timeout_s: float = 0.25,
                 probe: TextProbe | None = None) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        hidden = getattr(getattr(getattr(engine, "model", None), "cfg", None), "hidden_size", None)
        if probe is not None and hidden is not None and hidden != probe.hidden_size:
            raise ValueError(f"the text probe reads {probe.hidden_size}-wide states of {probe.model}; "
                             f"this engine's model has {hidden}")
        self.engine, self.fallback, self.timeout_s, self.probe = engine, fallback, timeout_s, probe
        self.context = context or (lambda: [])
        tok = engine.tokenizer
        marks = [tok.encode(m, add_special_tokens=False) for m in END_MARKS]
        # the token the chat template puts right after a user's words (ChatML: <|im_end|>)
        probe = "\u2063probe\u2063"
        rendered = tok.render_chat([{"role": "user", "content": probe}], add_generation_prompt=False)
        after = tok.encode(rendered[rendered.rindex(probe) + len(probe):], add_special_tokens=False)
        ids = {m[0] for m in marks if len(m) == 1} | set(after[:1])
        if not ids:
            raise ValueError("the tokenizer has no single-token sentence end or message end")
        self.end_ids = tuple(sorted(ids))
        self.calls = self.fallbacks = 0
        self._last: tuple[tuple, float] | None = None  # the newest prompt asked, and its P

    def prompt_ids(self, text: str) -> list[int] | None:
        """The chat so far plus the user's words as an open user message (trailing punctuation
        stripped, "%" spelled as spoken); None when no words are left."""
        words = _PERCENT.sub(" percent", without_end_punctuation(text))
        if not words:
            return None
        tok = self.engine.tokenizer
        rendered = tok.render_chat([*self.context(), {"role": "user", "content": words}],
                                   add_generation_prompt=False)
        return tok.encode(rendered[: rendered.rindex(words) + len(words)], add_special_tokens=False)

    def probability(self, text: str) -> float:
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        ids = self.prompt_ids(text)
        if ids is None:
            return self.fallback.probability(text)
        key = tuple(ids)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        self.calls += 1
        try:
            scored = self.engine.score_prompt(ids, self.end_ids, timeout_s=self.timeout_s)
        except ValueError:  # a conversation past the context: the words alone still score
            scored = None
        if scored is None:
            self.fallbacks += 1
            return self.fallback.probability(text)
        p = scored.next_token_p if self.probe is None else self.probe.probability(scored.hidden)
        p = min(max(float(p), 0.0), 1.0)
        self._last = (key, p)
        return p


class BackgroundScorer:
    """Scores transcripts on its own thread; `peek` never blocks. The detector asks it at every
    VAD window of a pause (turn_detection.detector: it holds the turn while P is pending, as a
    blocking scorer would). Blocking there was not free: on a 2-core Zen 1 the engine, busy
    prefilling the words ahead, took 130-250 ms a score, and the audio that came meanwhile
    waited in the hearing thread's queue: the STT saw the pause ~250 ms late, so its pause
    decode (the words the text witness needs) started late too (the voice benchmark's
    turns: the transcript with the turn's last word came 765-836 ms after its end).
    Only the newest text waits to be scored: an older one still queued is dropped."""

    _CACHE = 16  # texts whose P is kept (a turn's interims at a pause: a handful)

    def __init__(self, scorer: TextScorer) -> None:
        self.scorer = scorer
        self._cond = threading.Condition()
        self._scores: OrderedDict[str, float] = OrderedDict()
        self._queued: str | None = None
        self._scoring: str | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._generation = 0  # forget() counts; a score asked before it is not kept

    def forget(self) -> None:
        """The conversation before the words changed (a new turn): P of the same words may
        differ now, so nothing scored so far is reused."""
        with self._cond:
            self._scores.clear()
            self._queued = None
            self._generation += 1

    def probability(self, text: str) -> float:
        """The blocking way (the TextScorer protocol), on the caller's thread."""
        return self.scorer.probability(text)

    def peek(self, text: str) -> float | None:
        """P for `text` when scored; else None, and `text` is scored next (closed: 0.5, no
        evidence either way, so a detector still in use is never held)."""
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        with self._cond:
            if text in self._scores:
                return self._scores[text]
            if self._closed:
                return 0.5
            if text == self._scoring:
                return None
            self._queued = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="parley-turn-text", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._queued is not None)
                if self._closed:
                    return
                text, self._queued = self._queued, None
                self._scoring, generation = text, self._generation
            try:
                p = self.scorer.probability(text)
            except Exception:  # the detector must get an answer: the turn never waits on a failure
                log.exception("the text witness failed on %r; scoring it 0.5", text)
                p = 0.5
            with self._cond:
                self._scoring = None
                if generation != self._generation:
                    continue
                self._scores[text] = p
                while len(self._scores) > self._CACHE:
                    self._scores.popitem(last=False)
