"""Next-token choice per sequence: repetition penalty, temperature, top-k, top-p, min-p, seed."""

from __future__ import annotations

import torch

from llm_engine.sampling_params import SamplingParams


def apply_repetition_penalty(logits: torch.Tensor, token_ids: list[int], penalty: float) -> torch.Tensor:
    # CTRL / Hugging Face rule: divide positive logits, multiply negative ones.
    idx = torch.tensor(sorted(set(token_ids)), dtype=torch.long, device=logits.device)
    picked = logits[idx]
    logits[idx] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits


def filter_logits(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:  # [V] fp32, temperature applied
    if p.top_k > 0 and p.top_k < logits.shape[-1]:
        kth = torch.topk(logits, p.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= p.top_p  # keep the smallest set reaching top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    if p.min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < p.min_p * probs.max(), float("-inf"))
    return logits


class Sampler:
    """Stateless but for the per-request generators (seeded requests reproduce exactly)."""

    def __init__(self) -> None:
        self._generators: dict[str, torch.Generator] = {}

    def generator(self, request_id: str, seed: int | None) -> torch.Generator | None:
        if seed is None:
            return None
        g = self._generators.get(request_id)
        if g is None:
            g = self._generators[request_id] = torch.Generator().manual_seed(seed)
        return g

    def release(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def probs(self, logits: torch.Tensor, p: SamplingParams, history: list[int]) -> torch.Tensor:
        """The distribution a token is drawn from ([V] fp32): used by sampling and by
        speculative verification, which must see exactly the same one."""
        logits = logits.float().clone()
        if p.repetition_penalty != 1.0 and history:
            logits = apply_repetition_penalty(logits, history, p.repetition_penalty)
        if p.greedy:
            return torch.zeros_like(logits).scatter_(0, logits.argmax().view(1), 1.0)
        return filter_logits(logits / p.temperature, p).softmax(-1)

    def sample(self, logits: torch.Tensor, requests: list[tuple[str, SamplingParams, list[int]]]) -> list[int]:
        """logits [N, V]; one (request_id, params, token history) per row -> N token ids."""
        if all(p.greedy and p.repetition_penalty == 1.0 for _, p, _ in requests):
            return logits.argmax(-1).tolist()  # one call for the common greedy batch
        out = []
        for row, (rid, p, history) in zip(logits, requests):
            if p.greedy and p.repetition_penalty == 1.0:
                out.append(int(row.argmax()))
                continue
            probs = self.probs(row, p, history)
            if p.greedy:
                out.append(int(probs.argmax()))
                continue
            g = self.generator(rid, p.seed)
            out.append(int(torch.multinomial(probs.cpu(), 1, generator=g)))
        return out
