"""A draft model: any `Target` (a smaller model sharing the target's tokenizer, with its own
paged cache in the engine) drafting k tokens autoregressively, greedy or sampled."""

from __future__ import annotations

import torch

from llm_engine.speculative.drafter import Draft, Drafter


class DraftModelDrafter(Drafter):
    name = "draft"

    def __init__(self, model, temperature: float = 0.0, seed: int = 0) -> None:
        self.model = model  # a Target
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        if k <= 0:
            return Draft([])
        n_ctx = len(context_token_ids)
        # the draft cache lags the context after rejections: roll back, then catch up
        cached = min(self.model.length(seq_id), n_ctx - 1)
        self.model.truncate(seq_id, cached)
        _, logits = self.model.extend(seq_id, context_token_ids[cached:])
        last = logits[-1]
        ids, probs = [], []
        for i in range(k):
            if self.temperature > 0:
                p = torch.softmax(last / self.temperature, -1)
                tok = int(torch.multinomial(p, 1, generator=self.gen))
                probs.append(p)
            else:
                tok = int(last.argmax())
            ids.append(tok)
            if i + 1 < k:
                _, logits = self.model.extend(seq_id, [tok])
                last = logits[-1]
        # keep only the verified context in the draft cache; drafted slots are re-fed if kept
        self.model.truncate(seq_id, n_ctx)
        return Draft(ids, torch.stack(probs) if probs else None)

    def release(self, seq_id: str) -> None:
        self.model.release(seq_id)
