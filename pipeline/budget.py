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
MARKS = ("speech_start", "speech_end", "end_of_turn", "final_transcript", "llm_request", "llm_first_token",
         "first_chunk", "tts_first_audio", "ack_audio", "output_first_frame")
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
        if name in _GENERATION_MARKS or name not in self.marks:
            self.marks[name] = t

    def perceived_ms(self) -> float | None:
        m = self.marks
        if "speech_end" not in m or "output_first_frame" not in m:
            return None
        return (m["output_first_frame"] - m["speech_end"]) * 1000.0

    def report(self) -> dict[str, Any]:
        m, stages, overruns = self.marks, [], []
        eot = m.get("end_of_turn")
        for name, a, b in STAGES:
            ms = (m[b] - m[a]) * 1000.0 if a in m and b in m else None
            allot = self.config.allotment_ms(name)
            over = ms is not None and ms > allot
            hidden = ms is not None and eot is not None and m[b] <= eot and name != "endpointing"
            if over and not hidden:
                overruns.append(name)
            stages.append({"name": name, "ms": None if ms is None else round(ms, 1), "allotment_ms": allot,
                           "overrun": over and not hidden, "hidden": hidden})
        perceived = self.perceived_ms()
        if perceived is not None and perceived > self.config.total_ms:
            overruns.append("perceived")
        t0 = m.get("speech_end", min(m.values()) if m else 0.0)
        return {"type": "budget", "turn": self.turn,
                "perceived_ms": None if perceived is None else round(perceived, 1),
                "budget_ms": self.config.total_ms, "stages": stages, "overruns": overruns,
                "acknowledged": self.acknowledged, "user_text": self.user_text, "reply_text": self.reply_text,
                "marks": {k: round(v - t0, 4) for k, v in sorted(m.items(), key=lambda kv: kv[1])}}


class LatencyBudget:
    """One session's budget: the open turn, reports to subscribers, Prometheus metrics."""

    def __init__(self, config: BudgetConfig | None = None, *, registry: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or BudgetConfig()
        self.clock = clock
        self.turn: TurnBudget | None = None
        self.reports: list[dict[str, Any]] = []
        self._subscribers: list[Callable[[dict[str, Any]], None]] = []
        self._turns = 0
        self._metrics = _Metrics(registry) if registry is not None else None

    def subscribe(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self._subscribers.append(callback)

    # -- marks from the stages ----------------------------------------------------------
    def open_turn(self, t: float | None = None) -> TurnBudget:
        """The user started speaking: a new turn, unless the open one has not ended yet."""
        if self.turn is None or "end_of_turn" in self.turn.marks:
            if self.turn is not None and "output_first_frame" not in self.turn.marks:
                self._close(self.turn)  # ended, never answered (e.g. the user went on): report it
            self.turn = TurnBudget(self._turns, self.config)
            self._turns += 1
            self.turn.mark("speech_start", self.clock() if t is None else t)
        return self.turn

    def mark(self, name: str, t: float | None = None) -> None:
        turn = self.turn if self.turn is not None else self.open_turn(t)
        turn.mark(name, self.clock() if t is None else t)
        if name == "ack_audio":
            turn.acknowledged = True
        if name == "output_first_frame" and "end_of_turn" in turn.marks:
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
