"""Batch-1 decode tokens/s of the engine on random-weight models (CUDA) against the bandwidth
roofline: (weight bytes + KV bytes read per token) / peak bandwidth. Two shapes: Llama-3-8B
(bandwidth-bound) and the voice model's, SmolLM2-135M (launch-bound: what CUDA graphs are for).
Called by benchmarks/kernels.py --engine."""

from __future__ import annotations

import itertools
import time

H200_PEAK_GBS = 4800.0
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
                 num_kv_heads=8, head_dim=128, rope_theta=500000.0, max_position_embeddings=8192,
                 rms_norm_eps=1e-5)
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
                    num_kv_heads=3, head_dim=64, rope_theta=100000.0, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, tie_word_embeddings=True)
SHAPES = {"llama3-8b": LLAMA3_8B, "smollm2-135m": SMOLLM2_135M}


def _random_engine(shape: dict, enforce_eager: bool, max_len: int):
    import torch
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    from llm_engine import EngineConfig, LLMEngine, ModelConfig
    from llm_engine.model import LlamaModel
    from llm_engine.rope import rope_tables
    from llm_engine.tokenizer import Tokenizer

    mcfg = ModelConfig(**shape)
    with torch.device("meta"):
        model = LlamaModel(mcfg, max_len, backend="auto")
    model = model.to_empty(device="cuda").to(torch.bfloat16).eval()  # [~16 GB of bf16 weights for 8B]
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0)
    model.cos, model.sin = rope_tables(mcfg, max_len, torch.device("cuda"))
    tok = Tokenizer(HFTokenizer(models.WordLevel({"t0": 0}, unk_token="t0")), None, None, [], False)
    cfg = EngineConfig(device="cuda", dtype=torch.bfloat16, backend="auto", max_model_len=max_len,
                       max_cache_tokens=max_len * 2, max_num_seqs=4, enforce_eager=enforce_eager)
    return LLMEngine(model, tok, cfg), model


def bench_engine_decode(prompt_len: int = 512, new_tokens: int = 128) -> list[dict]:
    import torch

    from llm_engine import SamplingParams

    rows = []
    for (name, shape), eager in itertools.product(SHAPES.items(), (False, True)):
        engine, model = _random_engine(shape, eager, max_len=2048)
        prompt = [int(t) for t in torch.randint(1, 1000, (prompt_len,))]

        def run(n: int, engine=engine, prompt=prompt) -> float:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            engine.generate([prompt], SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        run(new_tokens)  # warm-up: Triton JIT, CUDA-graph capture
        t1 = min(run(1) for _ in range(3))  # prefill + first token
        tn = min(run(new_tokens + 1) for _ in range(3))
        tok_s = new_tokens / (tn - t1)
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        weight_bytes -= model.embed_tokens.weight.numel() * 2  # an embedding lookup reads one row
        if model.lm_head.weight is model.embed_tokens.weight:
            weight_bytes += model.lm_head.weight.numel() * 2
        c = model.cfg
        avg_ctx = prompt_len + new_tokens / 2
        kv_bytes = avg_ctx * c.num_layers * 2 * c.num_kv_heads * c.head_dim * 2
        roofline = H200_PEAK_GBS * 1e9 / (weight_bytes + kv_bytes)
        row = {"model": name, "cuda_graphs": not eager, "first_token_ms": round(t1 * 1e3, 2),
               "prompt_len": prompt_len, "new_tokens": new_tokens,
               "decode_tok_s": round(tok_s, 1), "roofline_tok_s": round(roofline, 1),
               "pct_roofline": round(100 * tok_s / roofline, 1),
               "weight_GB": round(weight_bytes / 1e9, 2), "kv_MB_per_token": round(kv_bytes / 1e6, 1)}
        print(row, flush=True)
        rows.append(row)
        del engine, model
        torch.cuda.empty_cache()
    return rows
