"""Pick the loader from the path and build (model, tokenizer)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from llm_engine.config import SUPPORTED_ARCHITECTURES, EngineConfig, ModelConfig
from llm_engine.linear import set_linear_backend
from llm_engine.loader.gguf_loader import gguf_config, gguf_metadata, gguf_weights, open_gguf
from llm_engine.loader.safetensors_loader import read_hf_config, read_safetensors
from llm_engine.model import LlamaModel
from llm_engine.rope import rope_tables
from llm_engine.tokenizer import Tokenizer
from parley.errors import ModelNotFoundError


def load_model(path: str | Path, cfg: EngineConfig) -> tuple[LlamaModel, Tokenizer]:
    path = Path(path)
    if not path.exists():
        raise ModelNotFoundError(str(path), "no such file or directory",
                                 f"give a Hugging Face model dir or a .gguf file ({', '.join(SUPPORTED_ARCHITECTURES)})")
    if path.is_dir():
        mcfg = read_hf_config(path)
        weights = read_safetensors(path)
        tok = Tokenizer.from_hf_dir(path)
    else:
        reader = open_gguf(path)
        meta = gguf_metadata(reader)
        mcfg = gguf_config(meta, path)
        weights = gguf_weights(reader, mcfg)
        tok = Tokenizer.from_gguf_fields(meta)
    if "lm_head.weight" not in weights and not mcfg.tie_word_embeddings:
        mcfg = dataclasses.replace(mcfg, tie_word_embeddings=True)
    if not mcfg.eos_token_ids and tok.eos_token_ids:
        mcfg = dataclasses.replace(mcfg, eos_token_ids=tok.eos_token_ids)
    model = build_model(mcfg, weights, cfg)
    return model, tok


def build_model(mcfg: ModelConfig, weights: dict[str, torch.Tensor], cfg: EngineConfig) -> LlamaModel:
    max_len = cfg.max_model_len or mcfg.max_position_embeddings
    with torch.device("meta"):
        model = LlamaModel(mcfg, max_len, backend=cfg.backend, sdpa_decode=cfg.cpu_sdpa_decode)
    model = model.to_empty(device="cpu")
    if mcfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.load_hf_weights(weights)
    device = cfg.resolved_device()
    model = model.to(device=device, dtype=cfg.resolved_dtype()).eval()
    set_linear_backend(model, cfg.linear_backend)
    model.cos, model.sin = rope_tables(mcfg, max_len, device)  # stay fp32 whatever the weights' dtype
    return model
