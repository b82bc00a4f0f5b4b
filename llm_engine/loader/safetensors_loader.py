"""Hugging Face directory: config.json + *.safetensors (sharded or not). Never pickle."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from llm_engine.config import ModelConfig
from parley.errors import ModelCorruptError, ModelNotFoundError


def read_hf_config(path: Path) -> ModelConfig:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelNotFoundError(str(path), "config.json is missing", "point at a Hugging Face model directory")
    try:
        raw = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelCorruptError(str(cfg_file), f"invalid JSON: {e}") from None
    return ModelConfig.from_hf(raw)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(str(path), "no *.safetensors weights (pickle checkpoints are not loaded)",
                                 "save the model with safe_serialization=True")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            weights.update(load_file(str(f)))
        except (SafetensorError, OSError) as e:
            raise ModelCorruptError(str(f), f"unreadable safetensors file: {e}") from None
    return weights
