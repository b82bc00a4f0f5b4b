"""Speculative decoding: drafters (n-gram lookup, draft model, trained EAGLE head), the exact
acceptance rule, adaptive draft length, and the verifier loop over a `Target`."""

from llm_engine.speculative.acceptance import Acceptance, accept_greedy, accept_sampled
from llm_engine.speculative.adaptive import AdaptiveDraftLength
from llm_engine.speculative.config import SpecMetrics, SpeculativeConfig
from llm_engine.speculative.draft_model import DraftModelDrafter
from llm_engine.speculative.drafter import Draft, Drafter
from llm_engine.speculative.factory import build_drafter
from llm_engine.speculative.head_drafter import HeadDrafter, load_head
from llm_engine.speculative.hybrid import HybridDrafter
from llm_engine.speculative.ngram import NgramDrafter
from llm_engine.speculative.verifier import SpecRequest, SpeculativeDecoder

__all__ = [
    "Acceptance",
    "AdaptiveDraftLength",
    "Draft",
    "DraftModelDrafter",
    "Drafter",
    "HeadDrafter",
    "HybridDrafter",
    "NgramDrafter",
    "SpecMetrics",
    "SpecRequest",
    "SpeculativeConfig",
    "SpeculativeDecoder",
    "accept_greedy",
    "accept_sampled",
    "build_drafter",
    "load_head",
]
