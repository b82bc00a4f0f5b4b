"""The perceived-latency budget as a first-class object.

Perceived latency is the end of the user's last word -> the first audible sample of the reply.
Each turn records marks on one monotonic clock (time.monotonic) as the stages pass them; a
stage's time is the gap between its two marks, held against its allotment. Preemptive work
(LLM and TTS started on the preflight transcript) can finish stages before the turn even ends:
such a stage is reported with its own time and `hidden: true` (it was off the critical path).

A turn's report goes out once the reply's first frame reaches the output: as a structured log
line, to every subscriber (the app, the transports' "budget" event) and into Prometheus
histograms on the registry the caller owns.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger("parley.budget")

# (stage, start mark, end mark) in pipeline order. DESIGN.md's split.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("endpointing", "speech_end", "end_of_turn"),
    ("transcript", "end_of_turn", "final_transcript"),
    ("first_token", "llm_request", "llm_first_token"),
    ("first_clause", "llm_first_token", "first_chunk"),
    ("first_audio", "first_chunk", "tts_first_audio"),
    ("playout", "tts_first_audio", "output_first_frame"),
)
REPORTS_KEPT = 64  # the newest turn reports a session keeps (LatencyBudget.reports)
MARKS = ("speech_start", "speech_end", "end_of_turn", "final_transcript", "llm_request", "llm_first_token",
         "acknowledgement", "first_chunk", "tts_first_audio", "output_first_frame")
# A generation restarted for the same turn (a stale preemptive reply) overwrites these.
_GENERATION_MARKS = frozenset({"llm_request", "llm_first_token", "first_chunk", "tts_first_audio"})


@dataclass(frozen=True)
class BudgetConfig:
    total_ms: float = 600.0
    endpointing_ms: float = 250.0
    transcript_ms: float = 50.0
    first_token_ms: float = 60.0
    first_clause_ms: float = 100.0
    first_audio_ms: float = 100.0
    playout_ms: float = 40.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int | float) or not 0 < value <= 60_000:
                raise ValueError(f"budget.{name} must be in (0, 60000] ms, got {value!r}")

    def allotment_ms(self, stage: str) -> float:
        return float(getattr(self, f"{stage}_ms"))


@dataclass
class TurnBudget:
    turn: int
    config: BudgetConfig
    marks: dict[str, float] = field(default_factory=dict)
    user_text: str = ""
    reply_text: str = ""
    acknowledged: bool = False

    def mark(self, name: str, t: float) -> None:
        if name not in MARKS:
            raise ValueError(f"unknown budget mark {name!r} (one of {MARKS})")
        if name == "llm_request":  # a new generation (a stale preemptive one was dropped)
            for later in ("llm_first_token", "first_chunk", "tts_first_audio"):
                self.marks.pop(later, None)
        if name in _GENERATION_MARKS or name not in self.marks:
            self.marks[name] = t

    def perceived_ms(self) -> float | None:
        m = self.marks
        if "speech_end" not in m or "output_first_frame" not in m:
            return None
        return (m["output_first_frame"] - m["speech_end"]) * 1000.0

    def report(self) -> dict[str, Any]:
        """Each stage's own time (`ms`) and its share of the critical path (`critical_ms`): the
        time it ran after the turn was committed (end of turn and final transcript both in).
        Work done before, by preemption, is `hidden`; overruns are judged on the critical part."""
        m, stages, overruns = self.marks, [], []
        commit = max((m[k] for k in ("end_of_turn", "final_transcript") if k in m), default=None)
        for name, a, b in STAGES:
            ms = (m[b] - m[a]) * 1000.0 if a in m and b in m else None
            if ms is not None and ms < 0:  # an acknowledgement's audio, not the reply's
                ms = None
            critical = ms
            if ms is not None and commit is not None and name not in ("endpointing", "transcript"):
                critical = max(0.0, (m[b] - max(m[a], commit)) * 1000.0)
            allot = self.config.allotment_ms(name)
            hidden = critical is not None and critical == 0.0 and ms > 0.0
            over = critical is not None and critical > allot
            if over:
                overruns.append(name)
            stages.append({"name": name, "ms": None if ms is None else round(ms, 1),
                           "critical_ms": None if critical is None else round(critical, 1),
                           "allotment_ms": allot, "overrun": over, "hidden": hidden})
        perceived = self.perceived_ms()
        if perceived is not None and perceived > self.config.total_ms:
            overruns.append("perceived")
        t0 = m.get("speech_end", min(m.values()) if m else 0.0)
        return {"type": "budget", "turn": self.turn,
                "perceived_ms": None if perceived is None else round(perceived, 1),
                "budget_ms": self.config.total_ms, "stages": stages, "overruns": overruns,
                "acknowledged": self.acknowledged, "user_text": self.user_text, "reply_text": self.reply_text,
                "marks": {k: round(v - t0, 4) for k, v in sorted(m.items(), key=lambda kv: kv[1])}}


@dataclass(frozen=True)
class ResponsePolicy:
    """How a reply acts on the time left. An acknowledgement ("Okay.") is spoken when the LLM's
    first token has not come `ack_margin_s` before the first-audio deadline; the first TTS chunk
    waits for more words when there is time to spare (`first_words`)."""

    ack_enabled: bool = True
    # one word each: a late reply's first chunk is one word, so a one-word phrase is a whole
    # chunk and is played from the synthesizer's memory (Synthesizer.remember), not synthesized
    ack_phrases: tuple[str, ...] = ("Mm-hmm.", "Okay.", "Sure.")
    ack_margin_s: float = 0.25  # say it this long before the first-audio deadline (TTS + playout)
    # ...but never before the reply had this long to start: past the deadline already, text due
    # any moment would otherwise wait behind ~0.5 s of "Okay."
    ack_grace_s: float = 0.12
    min_first_words: int = 1
    max_first_words: int = 6
    words_per_s: float = 12.0  # the LLM's pace in words, to turn time left into words to wait for
    seed: int = 0

    def __post_init__(self) -> None:
        if self.ack_enabled and not self.ack_phrases:
            raise ValueError("ack_phrases must not be empty when ack_enabled")
        if not 1 <= self.min_first_words <= self.max_first_words <= 50:
            raise ValueError("need 1 <= min_first_words <= max_first_words <= 50")
        if not 0 <= self.ack_margin_s <= 2 or not 0 <= self.ack_grace_s <= 2 or self.words_per_s <= 0:
            raise ValueError("ack_margin_s and ack_grace_s must be in [0, 2] and words_per_s > 0")

    def ack_wait_s(self, time_left_s: float | None) -> float | None:
        """Seconds from the request to wait for the first token before acknowledging (None: never)."""
        if not self.ack_enabled or time_left_s is None:
            return None
        return max(time_left_s - self.ack_margin_s, self.ack_grace_s)

    def pick_ack(self, turn: int) -> str:
        return self.ack_phrases[(turn + self.seed) % len(self.ack_phrases)]

    def first_words(self, time_left_s: float | None, synth_s: float = 0.05) -> int:
        if time_left_s is None:
            return self.min_first_words + 1
        words = int((time_left_s - synth_s) * self.words_per_s)
        return max(self.min_first_words, min(self.max_first_words, words))


class LatencyBudget:
    """One session's budget: the open turn, reports to subscribers, Prometheus metrics."""

    def __init__(self, config: BudgetConfig | None = None, *, registry: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or BudgetConfig()
        self.clock = clock
        self.turn: TurnBudget | None = None
        # the newest reports only: subscribers get each one as it closes, and a session of
        # thousands of turns must not keep them all
        self.reports: deque[dict[str, Any]] = deque(maxlen=REPORTS_KEPT)
        self._subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._turns = 0
        self._metrics = _Metrics(registry) if registry is not None else None

    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self._subscribers.append(callback)

    # -- marks from the stages ----------------------------------------------------------
    def open_turn(self, t: float | None = None, turn: int | None = None) -> TurnBudget:
        """The user started speaking: a new turn (numbered `turn`, or the next number), unless
        the open one has not ended yet."""
        if self.turn is None or "end_of_turn" in self.turn.marks:
            if self.turn is not None and "output_first_frame" not in self.turn.marks:
                self._close(self.turn)  # ended, never answered (e.g. the user went on): report it
            self.turn = TurnBudget(self._turns if turn is None else turn, self.config)
            self._turns = self.turn.turn + 1
            self.turn.mark("speech_start", self.clock() if t is None else t)
        return self.turn

    def mark(self, name: str, t: float | None = None) -> None:
        """A stage passed `name`. Outside a user turn (a greeting, an apology) it is ignored."""
        turn = self.turn
        if turn is None:
            return
        turn.mark(name, self.clock() if t is None else t)
        if name == "acknowledgement":
            turn.acknowledged = True
        m = turn.marks
        # the report goes out once the reply is audible; after an acknowledgement, once the
        # reply's first token (the stage it covered) is known as well
        if "end_of_turn" in m and "output_first_frame" in m and (
                not turn.acknowledged or "llm_first_token" in m):
            self._close(turn)
            self.turn = None

    def first_audio_deadline(self) -> float | None:
        """Monotonic time by which TTS must have audio for the turn to stay within budget."""
        turn = self.turn
        if turn is None or "speech_end" not in turn.marks:
            return None
        c = self.config
        return turn.marks["speech_end"] + (c.total_ms - c.playout_ms) / 1000.0

    def time_left_s(self) -> float | None:
        deadline = self.first_audio_deadline()
        return None if deadline is None else deadline - self.clock()

    def _close(self, turn: TurnBudget) -> None:
        report = turn.report()
        self.reports.append(report)
        log.info("turn budget %s", json.dumps(report))
        if self._metrics is not None:
            self._metrics.observe(report)
        for callback in list(self._subscribers):
            callback(report)


class _Metrics:
    """Prometheus histograms on the caller's registry (never the process-wide default)."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        buckets = (0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0)
        self.stage = Histogram("parley_stage_seconds", "Per-turn stage time", ["stage"], buckets=buckets,
                               registry=registry)
        self.perceived = Histogram("parley_perceived_latency_seconds", "End of user speech to first audible "
                                   "agent sample", buckets=buckets, registry=registry)
        self.overruns = Counter("parley_stage_overruns", "Stages over their allotment", ["stage"],
                                registry=registry)

    def observe(self, report: dict[str, Any]) -> None:
        for s in report["stages"]:
            if s["ms"] is not None:
                self.stage.labels(s["name"]).observe(s["ms"] / 1000.0)
        if report["perceived_ms"] is not None:
            self.perceived.observe(report["perceived_ms"] / 1000.0)
        for name in report["overruns"]:
            self.overruns.labels(name).inc()
