"""How a voice session trims its history to the context window: `fit_context` (fixed cut
points, so the kept prefix stays cached for several turns) and `ContextTrim`, the one set of
trim settings that the request, prefill-ahead, the next turn's prefill and the LLM witness
share, so all four agree on the kept history. Framework-free: messages are OpenAI-style dicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ContextTrim:
    """`reserve`: the reply's tokens (the request's max_tokens); `context_tokens`: the history
    budget (None: the engine's window); `allowance`: the user turn's share (fit_context's)."""
    reserve: int = 0
    context_tokens: int | None = None
    allowance: int = 0

    def __post_init__(self) -> None:
        if self.reserve < 0 or self.allowance < 0:
            raise ValueError(f"reserve and allowance must be >= 0, got {self.reserve}, {self.allowance}")
        if self.context_tokens is not None and self.context_tokens < 1:
            raise ValueError(f"context_tokens must be >= 1 or None, got {self.context_tokens}")

    def fit(self, engine: Any, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        return fit_context(engine, messages, self.reserve, max_tokens=self.context_tokens, allowance=self.allowance)


def fit_context(engine: Any, messages: list[dict[str, str]], reserve: int,
                headroom: float = 0.25, max_tokens: int | None = None, allowance: int = 0) -> list[dict[str, str]]:
    """Drop the oldest non-system messages until the prompt plus `reserve` generated tokens
    fits the engine's context window. The system prompt and the newest message always stay.
    `max_tokens` caps the window below the engine's own (a voice session's history budget).
    `allowance`: the newest message counts as at least this many tokens, so for any newest
    message up to that size the kept history is the same one, known before it is said: the
    session prefills it while the reply plays (`ParleyLLM.prefill_next_turn`).

    The kept history starts at one of fixed cut points, `_cut_points`: one every `headroom`
    share of the window, counted from the oldest message, so they stay put while the history
    grows. The start moves on a cut only when the prompt no longer fits, and then the kept
    prefix stays the same for the next several turns: the engine's prefix cache still holds
    it. (Trimming to the fewest drops that fit moved the start every turn once the history
    was full: a 200-turn soak re-prefilled ~1500 tokens each turn and lost turns to the 10 s
    LLM deadline.)"""
    limit = getattr(engine, "token_limit", None)
    if limit is None or not hasattr(engine, "encode_chat"):
        return messages
    limit = limit if max_tokens is None else min(limit, max_tokens)
    if not 0 < headroom < 1:
        raise ValueError(f"headroom must be in (0, 1), got {headroom}")
    if allowance < 0:
        raise ValueError(f"allowance must be >= 0, got {allowance}")
    total = len(engine.encode_chat(messages))
    if allowance and len(messages) > 1:  # chat templates concatenate per-message segments: the newest one's share
        reserve += max(0, allowance - (total - len(engine.encode_chat(messages[:-1]))))
    if total + reserve < limit:
        return messages
    droppable = [i for i, m in enumerate(messages[:-1]) if m["role"] != "system"]

    def without(k: int) -> list[dict[str, str]]:  # the k oldest droppable messages gone
        gone = set(droppable[:k])
        return [m for i, m in enumerate(messages) if i not in gone]

    cuts = _cut_points([messages[i] for i in droppable], max(1, int(headroom * limit)))
    # the first cut that fits: binary search (fitting is monotone in the drops), O(log n) passes
    lo, hi = 0, len(cuts) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if len(engine.encode_chat(without(cuts[mid]))) + reserve < limit:
            hi = mid
        else:
            lo = mid + 1
    return without(cuts[lo])


def _cut_points(droppable: list[dict[str, str]], chunk: int) -> list[int]:
    """Drop counts the kept history may start at: 0, then one past each further `chunk`
    tokens of droppable messages, then all of them. A cut depends only on the messages before
    it, never on the newest. Tokens are estimated at 4 characters each, not counted: only the
    spacing of the cuts depends on the estimate, never whether the kept prompt fits, and
    counting (a chat-template encode per message) cost ~0.2 ms a message, every turn."""
    cuts, acc = [0], 0
    for k, m in enumerate(droppable, 1):
        acc += len(str(m.get("content", ""))) // 4 + 4  # + the role's tokens
        if acc >= chunk:
            cuts.append(k)
            acc = 0
    if cuts[-1] != len(droppable):
        cuts.append(len(droppable))
    return cuts
