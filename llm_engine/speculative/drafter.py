"""The one interface every drafter implements."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Draft:
    token_ids: list[int]  # the k proposed ids (may be fewer than asked, even 0)
    probs: torch.Tensor | None = None  # [k, V] proposal distributions; None = deterministic


class Drafter:
    """propose(context, k) -> Draft. Stateful drafters key their state by `seq_id` and are told
    the verified outcome through `accepted(...)`; `release(seq_id)` frees it."""

    name = "base"

    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        raise NotImplementedError

    def accepted(self, seq_id: str, context_token_ids: list[int], **target_outputs) -> None:
        """Called after verification with the full verified context (and target features)."""

    def release(self, seq_id: str) -> None:
        """Drop per-sequence state."""
