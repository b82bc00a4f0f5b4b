"""EAGLE-style draft head: one Llama decoder layer over the target's last hidden state.

Row t of the head's input fuses the target's feature g_t with the embedding of token x_{t+1};
the layer predicts g_{t+1}, and the target's own LM head turns that into a distribution over
x_{t+2}. g is the target's last hidden state AFTER its final RMSNorm (exactly what its LM head
sees): the pre-norm residual stream of SmolLM2-135M has a few dimensions near 4,400 against a
median of ~1, which swamped the feature loss of the first head (teacher-forced agreement 0.28
on generated tokens); after the norm every dimension's std is 1-14. The draft LM head is the
target's, restricted to `draft_vocab` (the ids the target actually emits in the training data,
most frequent first): drafting then multiplies by ~8k rows instead of 49,152. Embeddings and
LM head are the target's (not stored here): the shipped weights are fc + one layer + the id list.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from kernels import rms_norm, rotary
from llm_engine.linear import Linear  # oneDNN on CPU when drafting, F.linear when training


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int = 576
    num_heads: int = 9
    num_kv_heads: int = 3
    intermediate_size: int = 1536
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    max_positions: int = 8192
    draft_vocab_size: int = 0  # rows of the target LM head the draft uses; 0 = all of them

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
        self.fc = Linear(2 * d, d, bias=False)
        self.input_norm = nn.Parameter(torch.ones(d))
        self.q_proj = Linear(d, cfg.num_heads * hd, bias=False)
        self.k_proj = Linear(d, cfg.num_kv_heads * hd, bias=False)
        self.v_proj = Linear(d, cfg.num_kv_heads * hd, bias=False)
        self.o_proj = Linear(cfg.num_heads * hd, d, bias=False)
        self.post_norm = nn.Parameter(torch.ones(d))
        self.gate_up = Linear(d, 2 * cfg.intermediate_size, bias=False)
        self.down = Linear(cfg.intermediate_size, d, bias=False)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        ang = torch.arange(cfg.max_positions).float()[:, None] * inv[None]  # [P, D/2]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.register_buffer("draft_vocab", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))

    def project(self, features: torch.Tensor, next_embeds: torch.Tensor, positions: torch.Tensor):
        """-> residual x [T, D], rotated q [T, H, hd], k / v [T, Hk, hd] of the head's rows."""
        cfg, hd = self.cfg, self.cfg.head_dim
        x = self.fc(torch.cat([next_embeds, features], dim=-1))
        h = rms_norm(x, self.input_norm, cfg.rms_eps, backend="torch")
        t = h.shape[0]
        q = self.q_proj(h).view(t, cfg.num_heads, hd)
        k = self.k_proj(h).view(t, cfg.num_kv_heads, hd)
        v = self.v_proj(h).view(t, cfg.num_kv_heads, hd)
        q, k = rotary(q, k, positions, self.cos, self.sin, backend="torch")
        return x, q, k, v

    def attend(self, x, q, k, v, mask: torch.Tensor) -> torch.Tensor:
        """x [T, D], q [T, H, hd], k / v [S, Hk, hd], mask [T, S] bool -> predicted g [T, D]."""
        cfg = self.cfg
        a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                           attn_mask=mask, enable_gqa=True)  # [H, T, hd]
        x = x + self.o_proj(a.transpose(0, 1).reshape(x.shape[0], -1))
        h = rms_norm(x, self.post_norm, cfg.rms_eps, backend="torch")
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)

    def forward(
        self,
        features: torch.Tensor,  # [T, D] target features g_t (post final norm)
        next_embeds: torch.Tensor,  # [T, D] embeddings of x_{t+1}
        positions: torch.Tensor,  # [T] int64
        cache: HeadCache | None = None,
    ) -> torch.Tensor:  # [T, D] predicted g_{t+1}
        x, q, k, v = self.project(features, next_embeds, positions)
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.append(k, v)
        t, s = q.shape[0], k.shape[0]
        mask = torch.arange(s)[None, :] <= (torch.arange(t)[:, None] + past)  # [T, S]
        return self.attend(x, q, k, v, mask)
