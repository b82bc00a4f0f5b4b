"""The head with n-gram lookup in front: what method="auto" builds for the embedded model.

A reply that restates the user's words (names, numbers, list items) is where prompt lookup
is right for many tokens in a row, and free; elsewhere the trained head drafts. When the
context's tail (>= min_match tokens) occurs earlier, the n-gram continuation is the draft;
otherwise the head's. The head still receives every verified feature (it catches up on its
next draft), so switching costs nothing.
"""

from __future__ import annotations

from llm_engine.speculative.drafter import Draft, Drafter
from llm_engine.speculative.ngram import NgramDrafter


class HybridDrafter(Drafter):
    name = "head+ngram"

    def __init__(self, head: Drafter, ngram_max: int = 4, min_match: int = 3) -> None:
        self.head = head
        self.lookup = NgramDrafter(max(ngram_max, min_match), min_match)

    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        if k <= 0:
            return Draft([])
        d = self.lookup.propose(seq_id, context_token_ids, k)
        if d.token_ids:  # a point-mass proposal: exact under the sampled rule too (q one-hot)
            return d
        return self.head.propose(seq_id, context_token_ids, k)

    def accepted(self, seq_id: str, context_token_ids: list[int], **target_outputs) -> None:
        self.head.accepted(seq_id, context_token_ids, **target_outputs)

    def release(self, seq_id: str) -> None:
        self.head.release(seq_id)
