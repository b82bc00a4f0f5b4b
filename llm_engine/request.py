"""Per-request engine state: the sequence, its detokenizer, its output sink, timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from llm_engine.detokenizer import IncrementalDetokenizer
from llm_engine.outputs import RequestOutput
from llm_engine.sequence import Sequence

# sink(delta_text, final_output_or_None): called from the engine thread (an abort's final
# output from the thread that called abort()).
Sink = Callable[[str, RequestOutput | None], None]


@dataclass(eq=False)
class Request:
    seq: Sequence
    detok: IncrementalDetokenizer
    sink: Sink | None = None
    t_arrival: float = field(default_factory=time.perf_counter)
    t_first_token: float | None = None
    output: RequestOutput | None = None
    num_emitted: int = 0  # output tokens accepted so far (speculative drafts in flight excluded)
    pending: list[str] = field(default_factory=list)  # this step's text deltas, sent once per step
    # finish() runs on the engine thread (stop, length) or on any thread (abort): exactly once
    _finish_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def flush(self) -> None:
        """Send this step's deltas as one (a verify pass accepts several tokens: one wake-up
        of the consumer's event loop per step, not per token)."""
        if self.pending and self.sink is not None and self.output is None:
            text = "".join(self.pending)
            self.pending.clear()
            self.sink(text, None)

    def finish(self, reason: str, extra: dict[str, float] | None = None, error: str | None = None,
               hidden: torch.Tensor | None = None) -> RequestOutput:
        with self._finish_lock:
            if self.output is not None:
                return self.output
            tail = self.detok.finish() if reason not in ("abort", "error") else ""
            seq = self.seq
            seq.finish_reason = reason
            now = time.perf_counter()
            metrics = {"total_s": now - self.t_arrival, **(extra or {})}
            if self.t_first_token is not None:
                metrics["ttft_s"] = self.t_first_token - self.t_arrival
            p = seq.num_prompt_tokens
            self.output = RequestOutput(
                seq.request_id, seq.token_ids[:p], seq.token_ids[p : p + self.num_emitted],
                self.detok.text, reason, seq.num_cached_tokens, metrics, error, hidden,
            )
        if self.sink is not None:
            self.sink(tail, self.output)
        return self.output
