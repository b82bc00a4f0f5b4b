"""Per-request engine state: the sequence, its detokenizer, its output sink, timing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from llm_engine.detokenizer import IncrementalDetokenizer
from llm_engine.outputs import RequestOutput
from llm_engine.sequence import Sequence

# sink(delta_text, final_output_or_None): called from the engine thread.
Sink = Callable[[str, RequestOutput | None], None]


@dataclass(eq=False)
class Request:
    seq: Sequence
    detok: IncrementalDetokenizer
    sink: Sink | None = None
    t_arrival: float = field(default_factory=time.perf_counter)
    t_first_token: float | None = None
    output: RequestOutput | None = None

    def finish(self, reason: str) -> RequestOutput:
        if self.output is not None:
            return self.output
        tail = self.detok.finish() if reason != "abort" else ""
        seq = self.seq
        seq.finish_reason = reason
        now = time.perf_counter()
        metrics = {"total_s": now - self.t_arrival}
        if self.t_first_token is not None:
            metrics["ttft_s"] = self.t_first_token - self.t_arrival
        self.output = RequestOutput(
            seq.request_id, seq.token_ids[: seq.num_prompt_tokens], list(seq.output_token_ids),
            self.detok.text, reason, seq.num_cached_tokens, metrics,
        )
        if self.sink is not None:
            self.sink(tail, self.output)
        return self.output
