"""Greedy output is identical with and without speculation, per method, batch 1 and mixed."""

from __future__ import annotations

import pytest
import torch

from llm_engine.speculative import (
    DraftModelDrafter,
    HeadDrafter,
    HybridDrafter,
    NgramDrafter,
    SpecRequest,
    SpeculativeDecoder,
)
from llm_engine.speculative.head import EagleHead, HeadConfig
from llm_engine.speculative.hf_target import HFTarget

transformers = pytest.importorskip("transformers")


def _tiny_llama(seed: int, layers: int = 2, kv: int = 2):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=kv,
                                   max_position_embeddings=512, tie_word_embeddings=seed % 2 == 0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _head_drafter(target: HFTarget, seed: int = 0) -> HeadDrafter:
    torch.manual_seed(seed)
    head = EagleHead(HeadConfig(hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128)).eval()
    w, eps = target.norm()
    return HeadDrafter(head, target.embed_weight(), target.lm_head_weight(), w, eps)


def _drafter(method: str, target: HFTarget):
    if method == "ngram":
        return NgramDrafter()
    if method == "head":
        return _head_drafter(target)
    if method == "head+ngram":
        return HybridDrafter(_head_drafter(target))
    return DraftModelDrafter(HFTarget(_tiny_llama(99, layers=1)))


def _prompts(n: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    base = torch.randint(0, 96, (12,), generator=g).tolist()
    return [(base * 2)[: 8 + 5 * i] + torch.randint(0, 96, (i + 1,), generator=g).tolist() for i in range(n)]


def _run(target, drafter, prompts, max_tokens=40, k=4, adaptive=True):
    reqs = [SpecRequest(f"r{i}", p, max_tokens=max_tokens) for i, p in enumerate(prompts)]
    dec = SpeculativeDecoder(target, drafter, k_max=k, adaptive=adaptive)
    dec.generate(reqs)
    return [r.output for r in reqs], dec.metrics


@pytest.mark.unit
@pytest.mark.parametrize("method", ["ngram", "head", "head+ngram", "draft"])
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_identical_random_models(method, seed):
    target = HFTarget(_tiny_llama(seed, kv=2 if seed == 0 else 1))
    prompts = _prompts(3)
    plain, _ = _run(target, None, prompts)
    single, m1 = _run(target, _drafter(method, target), prompts[:1], adaptive=False)
    mixed, m = _run(target, _drafter(method, target), prompts)
    assert single[0] == plain[0]
    assert mixed == plain
    assert m.passes < sum(len(o) for o in plain)  # speculation did skip target passes
    assert m1.drafted > 0 and m.accepted <= m.drafted
    assert target._caches == {}  # every sequence's cache released


@pytest.mark.unit
def test_ngram_lookup_prefers_longest_latest_match():
    d = NgramDrafter(max_n=3)
    assert d.propose("s", [1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2).token_ids == [7, 1]
    assert d.propose("s", [5, 6, 7], 3).token_ids == []
    assert d.propose("s", [4, 8, 4], 3).token_ids == [8, 4]
    with pytest.raises(ValueError):
        NgramDrafter(max_n=1, min_n=2)


@pytest.fixture(scope="module")
def smollm():
    from llm_engine.speculative.hf_target import load_embedded_hf

    torch.set_num_threads(1)
    tok, model = load_embedded_hf()
    return tok, HFTarget(model)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "head"])
def test_greedy_identical_embedded_model(smollm, method):
    from llm_engine.speculative import load_head

    tok, target = smollm
    chats = [[{"role": "user", "content": "Set a timer for ten minutes called pasta."}],
             [{"role": "user", "content": "Why do cats purr?"}]]
    prompts = [tok.apply_chat_template(c, add_generation_prompt=True, return_dict=False) for c in chats]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    plain, _ = _run(target, None, prompts, max_tokens=24)
    if method == "ngram":
        drafter = NgramDrafter()
    else:
        w, eps = target.norm()
        drafter = HeadDrafter(load_head(), target.embed_weight(), target.lm_head_weight(), w, eps)
    spec, m = _run(target, drafter, prompts, max_tokens=24)
    assert spec == plain
    assert m.drafted > 0


@pytest.mark.unit
def test_config_and_auto_selection():
    from llm_engine.speculative import SpeculativeConfig, build_drafter

    target = HFTarget(_tiny_llama(0))
    assert build_drafter(SpeculativeConfig(method="auto"), target).name == "ngram"  # head is 576-wide
    assert build_drafter(SpeculativeConfig(method="ngram"), target).name == "ngram"
    d = build_drafter(SpeculativeConfig(method="draft", draft_model="tiny"), target,
                      load_model=lambda p: HFTarget(_tiny_llama(5, layers=1)))
    assert d.name == "draft"
    with pytest.raises(ValueError):
        SpeculativeConfig(method="medusa")
    with pytest.raises(ValueError):
        SpeculativeConfig(method="draft")
    with pytest.raises(ValueError):
        SpeculativeConfig(num_tokens=0)
    with pytest.raises(ValueError):
        build_drafter(SpeculativeConfig(method="head"), target)
