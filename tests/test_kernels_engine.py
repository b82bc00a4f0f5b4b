"""The engine with every op forced through the Triton kernels (the interpreter on CPU)
gives the same greedy tokens as with the torch references, on a tiny random model."""

from __future__ import annotations

import importlib

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from llm_engine import EngineConfig, LLMEngine, ModelConfig, SamplingParams
from llm_engine.model import LlamaModel
from llm_engine.tokenizer import Tokenizer

DEV = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB = 96
CFG = ModelConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=16, max_position_embeddings=128, rope_theta=10000.0)
PROMPTS = [[5, 17, 33, 2, 41, 8, 60, 11, 3, 70, 25, 19, 44, 1, 9, 30, 12, 7], [88, 4, 51]]


def _counting(fn, name, calls):
    def wrapped(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)

    return wrapped


def _engine(backend: str, enforce_eager: bool = True, **config) -> LLMEngine:
    torch.manual_seed(0)  # same random weights for both backends
    # sdpa_decode=False: the engine's CPU SDPA shortcut would bypass the decode op under test
    model = LlamaModel(CFG, max_len=128, backend=backend, sdpa_decode=False).eval().to(DEV)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    tok = Tokenizer(HFTokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0")),
                    None, None, [], False)
    # fp32 on both devices: the comparison is kernels vs references, not bf16 rounding.
    config = {"block_size": 16, "num_blocks": 16, "max_num_seqs": 4, "max_model_len": 128, **config}
    cfg = EngineConfig(device=DEV, dtype=torch.float32, enforce_eager=enforce_eager, backend=backend, **config)
    return LLMEngine(model, tok, cfg)


@pytest.mark.slow
@pytest.mark.integration
def test_engine_greedy_tokens_same_with_triton_kernels_and_torch_refs(monkeypatch):
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    want = [o.token_ids for o in _engine("torch").generate(PROMPTS, params)]
    calls: dict[str, int] = {}
    for op in ("decode_attention", "prefill_attention", "rms_norm", "rotary", "store_kv", "silu_and_mul"):
        mod = importlib.import_module(f"kernels.{'kv_store' if op == 'store_kv' else op}")
        name = f"_{op}_triton"
        monkeypatch.setattr(mod, name, _counting(getattr(mod, name), name, calls))
    got = [o.token_ids for o in _engine("triton").generate(PROMPTS, params)]
    assert len(calls) == 6 and min(calls.values()) > 0, calls  # every op really ran its kernel
    assert all(len(t) == 6 for t in want)
    assert got == want


def _cuda_engine(enforce_eager: bool) -> LLMEngine:
    return _engine("auto", enforce_eager, num_blocks=64, max_num_seqs=8, cuda_graph_batch_sizes=(1, 2, 4, 8))


# five prompts: batches of 5, then fewer as replies of other lengths finish, pad to 8/4/2/1
GRAPH_PROMPTS = [*PROMPTS, [7, 7, 7, 12], [30, 31, 32, 33, 34, 35, 36], [1]]


@pytest.mark.gpu
@pytest.mark.integration
def test_cuda_graph_decode_gives_the_eager_tokens(monkeypatch):
    from llm_engine.cuda_graph import CudaGraphRunner

    want = [o.token_ids for o in _cuda_engine(True).generate(
        GRAPH_PROMPTS, [SamplingParams(max_tokens=4 + 3 * i, temperature=0.0, ignore_eos=True)
                        for i in range(len(GRAPH_PROMPTS))])]
    replays: list[int] = []
    run = CudaGraphRunner.run
    monkeypatch.setattr(CudaGraphRunner, "run",
                        lambda self, ids, meta: replays.append(meta.num_seqs) or run(self, ids, meta))
    engine = _cuda_engine(False)
    got = [o.token_ids for o in engine.generate(
        GRAPH_PROMPTS, [SamplingParams(max_tokens=4 + 3 * i, temperature=0.0, ignore_eos=True)
                        for i in range(len(GRAPH_PROMPTS))])]
    assert {5, 4, 3, 2, 1} <= set(replays), replays  # padded batches 8, 4, 4, 2, 1 all replayed
    assert got == want
    assert engine.num_free_blocks == engine.num_blocks


@pytest.mark.gpu
@pytest.mark.integration
@pytest.mark.parametrize("eager", [True, False])
def test_ngram_speculation_on_cuda_gives_the_plain_tokens(eager):
    from llm_engine.speculative.config import SpeculativeConfig

    prompts = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7], [40, 41, 42, 40, 41, 42, 40]]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    engine = _cuda_engine(eager)
    want = [o.token_ids for o in engine.generate(prompts, params)]
    engine.speculative = SpeculativeConfig(method="ngram", num_tokens=4)
    got = [o.token_ids for o in engine.generate(prompts, params)]
    assert got == want
    assert engine.spec_metrics.passes > 0  # the verifier really ran
    # rejection sampling on the device: runs to length (its draws differ from plain decoding's)
    sampled = engine.generate(prompts, SamplingParams(max_tokens=24, temperature=0.8, top_p=0.9, ignore_eos=True))
    assert [len(o.token_ids) for o in sampled] == [24, 24]
    assert engine.num_free_blocks == engine.num_blocks
