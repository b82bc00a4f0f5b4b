"""Rotary tables, computed once for every position (Hugging Face's float math, Llama-3 scaling)."""

from __future__ import annotations

import math

import torch

from llm_engine.config import ModelConfig


def inv_frequencies(cfg: ModelConfig) -> torch.Tensor:  # [D/2] fp32
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    sc = cfg.rope_scaling
    if not sc:
        return inv
    factor = sc["factor"]
    low, high = sc.get("low_freq_factor", 1.0), sc.get("high_freq_factor", 4.0)
    old_len = sc.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_l)


def rope_tables(cfg: ModelConfig, max_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [max_len, D/2] fp32."""
    inv = inv_frequencies(cfg)
    freqs = torch.arange(max_len, dtype=torch.float32)[:, None] * inv[None, :]  # [P, D/2]
    return freqs.cos().to(device), freqs.sin().to(device)
