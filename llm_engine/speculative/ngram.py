"""Prompt-lookup drafting (model-free): continue the latest earlier match of the context's tail.

Tries the longest suffix n-gram first (max_n down to min_n); the most recent earlier
occurrence wins, and its following tokens (up to k) are the draft. Strong when a reply
restates the user's words, names or numbers; free when it does not (no match, no draft).
"""

from __future__ import annotations

from llm_engine.speculative.drafter import Draft, Drafter


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n

    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        ctx = context_token_ids
        n_ctx = len(ctx)
        for n in range(min(self.max_n, n_ctx - 1), self.min_n - 1, -1):
            tail = ctx[n_ctx - n :]
            # scan right-to-left for the most recent earlier occurrence
            for start in range(n_ctx - n - 1, -1, -1):
                if ctx[start : start + n] == tail:
                    cont = ctx[start + n : start + n + k]
                    if cont:
                        return Draft(list(cont))
        return Draft([])
