"""Drafting with the trained EAGLE head (see head.py) for the embedded SmolLM2-135M."""

from __future__ import annotations

from pathlib import Path

import torch

from llm_engine.speculative.drafter import Draft, Drafter
from llm_engine.speculative.head import EagleHead, HeadCache, HeadConfig

WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-eagle.safetensors"


def load_head(path: Path = WEIGHTS, cfg: HeadConfig | None = None) -> EagleHead:
    from safetensors.torch import load_file

    if not path.exists():
        raise FileNotFoundError(f"EAGLE head weights not found: {path}")
    head = EagleHead(cfg or HeadConfig())
    head.load_state_dict(load_file(str(path)))
    return head.eval()


class _SeqState:
    def __init__(self) -> None:
        self.cache = HeadCache()
        self.feats: list[torch.Tensor] = []  # target features not yet fed to the head, in order


class HeadDrafter(Drafter):
    """embed [V, D], lm_head [V, D], norm weight [D] are the target's own tensors."""

    name = "head"

    def __init__(self, head: EagleHead, embed: torch.Tensor, lm_head: torch.Tensor,
                 norm_weight: torch.Tensor, eps: float, temperature: float = 0.0, seed: int = 0) -> None:
        self.head, self.embed, self.lm_head = head, embed, lm_head
        self.norm_weight, self.eps = norm_weight, eps
        self.temperature = temperature
        self.gen = torch.Generator().manual_seed(seed)
        self._seqs: dict[str, _SeqState] = {}

    def accepted(self, seq_id: str, context_token_ids: list[int], **target_outputs) -> None:
        st = self._seqs.setdefault(seq_id, _SeqState())
        st.feats.append(target_outputs["features"])  # [n, D] for the newly verified positions

    def _logits(self, f: torch.Tensor) -> torch.Tensor:  # [D] -> [V]
        f32 = f.float()
        h = f32 * torch.rsqrt(f32.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        return h @ self.lm_head.T

    @torch.inference_mode()
    def propose(self, seq_id: str, context_token_ids: list[int], k: int) -> Draft:
        st = self._seqs.get(seq_id)
        if k <= 0 or st is None or (not st.feats and len(st.cache) == 0):
            return Draft([])
        ctx = context_token_ids
        if st.feats:
            f = torch.cat(st.feats)  # [m, D] features of positions start .. len(ctx)-2
            st.feats = []
            m = f.shape[0]
            # start > rows only after a prefix-cache hit (no features for the cached prompt
            # part): the head then attends over the computed suffix only
            start = len(ctx) - 1 - m
            nxt = torch.tensor(ctx[start + 1 : start + 1 + m])
            out = self.head(f, self.embed[nxt], torch.arange(start, start + m), st.cache)
            st.cache.feature = out[-1]
        real = len(st.cache)
        f_hat = st.cache.feature
        pos0 = len(ctx) - 1
        ids, probs = [], []
        for i in range(k):
            logits = self._logits(f_hat)
            if self.temperature > 0:
                p = torch.softmax(logits / self.temperature, -1)
                tok = int(torch.multinomial(p, 1, generator=self.gen))
                probs.append(p)
            else:
                tok = int(logits.argmax())
            ids.append(tok)
            if i + 1 < k:
                pos = torch.tensor([pos0 + i])
                f_hat = self.head(f_hat[None], self.embed[tok][None], pos, st.cache)[0]
        st.cache.truncate(real)  # rows from predicted features are never kept
        return Draft(ids, torch.stack(probs) if probs else None)

    def release(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)
