"""EAGLE-style draft head: one Llama decoder layer over the target's last hidden state.

Row t of the head's input fuses the target's feature f_t (the last decoder layer's output,
*before* the final RMSNorm — the pre-LM-head residual stream) with the embedding of token
x_{t+1}; the layer predicts f_{t+1}, and the target's own final norm + LM head turn that into
a distribution over x_{t+2}. Embeddings, final norm and LM head are the target's (not stored
here): the shipped weights are only fc + one layer (~3.6 M parameters, 14 MB fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from kernels import rms_norm, rotary


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int = 576
    num_heads: int = 9
    num_kv_heads: int = 3
    intermediate_size: int = 1536
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    max_positions: int = 8192

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, num_heads by num_kv_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class HeadCache:
    """Contiguous K/V of the head's single layer for one sequence; truncation is rollback."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None  # [T, Hk, D]
        self.v: torch.Tensor | None = None
        self.feature: torch.Tensor | None = None  # [D] last predicted feature (drafting)

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[0]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k])
        self.v = v if self.v is None else torch.cat([self.v, v])
        return self.k, self.v

    def truncate(self, n: int) -> None:
        if self.k is not None:
            self.k, self.v = self.k[:n], self.v[:n]


class EagleHead(nn.Module):
    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, hd = cfg.hidden_size, cfg.head_dim
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.input_norm = nn.Parameter(torch.ones(d))
        self.q_proj = nn.Linear(d, cfg.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, cfg.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(d, cfg.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * hd, d, bias=False)
        self.post_norm = nn.Parameter(torch.ones(d))
        self.gate_up = nn.Linear(d, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, d, bias=False)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        ang = torch.arange(cfg.max_positions).float()[:, None] * inv[None]  # [P, D/2]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(
        self,
        features: torch.Tensor,  # [T, D] target features f_t
        next_embeds: torch.Tensor,  # [T, D] embeddings of x_{t+1}
        positions: torch.Tensor,  # [T] int64
        cache: HeadCache | None = None,
    ) -> torch.Tensor:  # [T, D] predicted f_{t+1}
        cfg, hd = self.cfg, self.cfg.head_dim
        x = self.fc(torch.cat([next_embeds, features], dim=-1))
        h = rms_norm(x, self.input_norm, cfg.rms_eps, backend="torch")
        t = h.shape[0]
        q = self.q_proj(h).view(t, cfg.num_heads, hd)
        k = self.k_proj(h).view(t, cfg.num_kv_heads, hd)
        v = self.v_proj(h).view(t, cfg.num_kv_heads, hd)
        q, k = rotary(q, k, positions, self.cos, self.sin, backend="torch")
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.append(k, v)
        rep = cfg.num_heads // cfg.num_kv_heads
        kk = k.repeat_interleave(rep, dim=1).transpose(0, 1)  # [H, S, D]
        vv = v.repeat_interleave(rep, dim=1).transpose(0, 1)
        s = kk.shape[1]
        mask = torch.arange(s)[None, :] <= (torch.arange(t)[:, None] + past)  # [T, S]
        a = F.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, attn_mask=mask)  # [H, T, D]
        x = x + self.o_proj(a.transpose(0, 1).reshape(t, -1))
        h = rms_norm(x, self.post_norm, cfg.rms_eps, backend="torch")
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)
