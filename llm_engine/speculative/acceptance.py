"""The speculative acceptance rule as pure functions on probability tensors.

Leviathan et al. 2023 / Chen et al. 2023: drafted token x_i ~ q_i is kept with probability
min(1, p_i(x_i) / q_i(x_i)); at the first rejection the replacement is drawn from the residual
norm(max(0, p_i - q_i)); when all k are kept a bonus token is drawn from p_{k+1}. The emitted
tokens are then distributed exactly as k+1 (or fewer) samples from the target. Greedy
(temperature 0) is the case p = one-hot(argmax): keep while the draft equals the target's argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Acceptance:
    accepted: int  # drafted tokens kept (0..k)
    tokens: list[int]  # accepted drafts + one target token (correction or bonus): accepted + 1 ids


def accept_greedy(draft: torch.Tensor, target_logits: torch.Tensor) -> Acceptance:
    """draft [k] int64; target_logits [k+1, V] (row i scores position of draft i)."""
    k = draft.shape[0]
    if target_logits.shape[0] != k + 1:
        raise ValueError(f"need k+1={k + 1} target rows, got {target_logits.shape[0]}")
    best = target_logits.argmax(-1)  # [k+1]
    miss = (best[:k] != draft).nonzero()
    n = int(miss[0]) if len(miss) else k
    return Acceptance(n, [*draft[:n].tolist(), int(best[n])])


def accept_sampled(
    draft: torch.Tensor,  # [k] int64
    draft_probs: torch.Tensor | None,  # [k, V] q_i; None = deterministic drafter (q one-hot)
    target_probs: torch.Tensor,  # [k+1, V] p_i, already temperature/top-p processed
    generator: torch.Generator | None = None,
) -> Acceptance:
    k = draft.shape[0]
    if target_probs.shape[0] != k + 1:
        raise ValueError(f"need k+1={k + 1} target rows, got {target_probs.shape[0]}")
    if draft_probs is None:  # a point-mass proposal (n-gram, greedy drafts)
        draft_probs = torch.zeros_like(target_probs[:k])
        draft_probs[torch.arange(k, device=draft.device), draft] = 1.0
    idx = torch.arange(k, device=draft.device)
    p_x = target_probs[idx, draft]
    q_x = draft_probs[idx, draft]
    # drawn on the generator's device (CPU by default), compared on the target's
    u = torch.rand(k, generator=generator, dtype=p_x.dtype,
                   device=generator.device if generator is not None else "cpu").to(p_x.device)
    # u < p/q  <=>  u*q < p (no division: q can be 0 only for tokens it never drafts)
    ok = u * q_x < p_x
    miss = (~ok).nonzero()
    n = int(miss[0]) if len(miss) else k
    if n == k:
        nxt = torch.multinomial(target_probs[k], 1, generator=generator)
    else:
        residual = (target_probs[n] - draft_probs[n]).clamp_min(0)
        total = residual.sum()
        # total == 0 only when p == q, where rejection has probability 0; guard float noise
        dist = residual / total if total > 0 else target_probs[n]
        nxt = torch.multinomial(dist, 1, generator=generator)
    return Acceptance(n, [*draft[:n].tolist(), int(nxt)])
