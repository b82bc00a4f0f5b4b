"""The paged KV cache tensors: per layer, K and V of shape [num_blocks, block_size, Hk, D]."""

from __future__ import annotations

import torch

from llm_engine.config import ModelConfig


class KVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.layers = [(torch.zeros(shape, dtype=dtype, device=device),
                        torch.zeros(shape, dtype=dtype, device=device)) for _ in range(cfg.num_layers)]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks src -> dst in every layer (copy-on-write after a truncate)."""
        for src, dst in pairs:
            for k, v in self.layers:
                k[dst].copy_(k[src])
                v[dst].copy_(v[src])
