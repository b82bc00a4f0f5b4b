"""One request's state: its tokens, how many have KV in the cache, its block table."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from llm_engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


_ids = itertools.count()


@dataclass(eq=False)
class Sequence:
    request_id: str
    token_ids: list[int]  # prompt + generated
    params: SamplingParams
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # of those, taken from the prefix cache at admission
    block_table: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: str | None = None
    arrival: int = field(default_factory=lambda: next(_ids))
    num_preemptions: int = 0
    prefill_only: bool = False  # engine.prefill(): compute and cache the prompt's KV, sample nothing
    # engine.next_token_probability(): with prefill_only, the ids whose summed probability at the
    # prompt's end is reported (metrics["next_token_p"])
    score_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.num_prompt_tokens:
            self.num_prompt_tokens = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_hint(self) -> bool:
        """A prefill ahead of a request (engine.prefill), which no caller waits on; a scored
        prefill (engine.next_token_probability) has a caller waiting."""
        return self.prefill_only and not self.score_ids

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
