"""Build the drafter a SpeculativeConfig names, for a given target.

"auto": the trained EAGLE head behind n-gram lookup (hybrid.py) when the shipped weights fit
the target (same hidden size and a target that exposes its embeddings / final norm / LM
head), else n-gram lookup alone (always available, costs nothing when it does not match). "draft" loads `draft_model` through the
caller's `load_model(path) -> Target` (the engine's loader, with its own paged cache).
"""

from __future__ import annotations

from collections.abc import Callable

from llm_engine.speculative.config import SpeculativeConfig
from llm_engine.speculative.draft_model import DraftModelDrafter
from llm_engine.speculative.drafter import Drafter
from llm_engine.speculative.head_drafter import WEIGHTS, HeadDrafter, load_head
from llm_engine.speculative.hybrid import HybridDrafter
from llm_engine.speculative.ngram import NgramDrafter


def _head_fits(target) -> bool:
    needed = ("embed_weight", "lm_head_weight", "norm")
    return WEIGHTS.exists() and all(hasattr(target, n) for n in needed) and \
        target.embed_weight().shape[1] == 576


def build_drafter(cfg: SpeculativeConfig, target, temperature: float = 0.0,
                  load_model: Callable[[str], object] | None = None) -> Drafter:
    method = cfg.method
    if method == "auto":
        if not _head_fits(target):
            return NgramDrafter(cfg.ngram_max, cfg.ngram_min)
        head = build_drafter(SpeculativeConfig(method="head"), target, temperature)
        return HybridDrafter(head, cfg.ngram_max)
    if method == "ngram":
        return NgramDrafter(cfg.ngram_max, cfg.ngram_min)
    if method == "head":
        if not _head_fits(target):
            raise ValueError("method='head': the shipped head is for SmolLM2-135M (hidden 576) only")
        w, eps = target.norm()
        return HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps,
                           temperature=temperature)
    if load_model is None:
        raise ValueError("method='draft' needs a model loader")
    return DraftModelDrafter(load_model(cfg.draft_model), temperature=temperature)
