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

from kernels import cpu_ops, rms_norm, rotary
from llm_engine.linear import Linear  # cpu_gemv on CPU when drafting, F.linear when training


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
    """Contiguous K/V of the head's single layer for one sequence, in buffers that grow by
    doubling (appending a draft row writes it in place instead of copying the whole cache);
    truncation is rollback."""

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None  # [capacity, Hk, D]
        self._v: torch.Tensor | None = None
        self._n = 0
        self.feature: torch.Tensor | None = None  # [D] last predicted feature (drafting)

    def __len__(self) -> int:
        return self._n

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k / v [m, Hk, D] -> the whole cache's K / V [T, Hk, D], contiguous views."""
        n, m = self._n, k.shape[0]
        if self._k is None or n + m > self._k.shape[0] or self._k.dtype != k.dtype:
            cap = max(64, 2 * (n + m))
            new_k, new_v = k.new_empty(cap, *k.shape[1:]), v.new_empty(cap, *v.shape[1:])
            if self._k is not None:
                new_k[:n], new_v[:n] = self._k[:n], self._v[:n]
            self._k, self._v = new_k, new_v
        self._k[n : n + m], self._v[n : n + m] = k, v
        self._n = n + m
        return self._k[: self._n], self._v[: self._n]

    def truncate(self, n: int) -> None:
        self._n = min(n, self._n)


def _sdpa(q, k, v, mask: torch.Tensor) -> torch.Tensor:
    """q [T, H, hd], k / v [S, Hk, hd], mask [T, S] bool -> [T, H, hd] (autograd-capable)."""
    a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                       attn_mask=mask, enable_gqa=True)  # [H, T, hd]
    return a.transpose(0, 1)


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
        h = rms_norm(x, self.input_norm, cfg.rms_eps)
        t = h.shape[0]
        q = self.q_proj(h).view(t, cfg.num_heads, hd)
        k = self.k_proj(h).view(t, cfg.num_kv_heads, hd)
        v = self.v_proj(h).view(t, cfg.num_kv_heads, hd)
        q, k = rotary(q, k, positions, self.cos, self.sin)
        return x, q, k, v

    def attend(self, x, q, k, v, mask: torch.Tensor) -> torch.Tensor:
        """x [T, D], q [T, H, hd], k / v [S, Hk, hd], mask [T, S] bool -> predicted g [T, D]."""
        return self._finish(x, _sdpa(q, k, v, mask))

    def _causal_cached(self, q, k, v) -> torch.Tensor:
        """q [T, H, hd], k / v [S, Hk, hd]; row i sees keys 0..S-T+i -> [T, H, hd].
        Drafting's case: the C++ decode attention on the cache as one block of S tokens
        (SDPA with a mask and GQA took 133 of a head step's 352 us, one thread)."""
        t, s = q.shape[0], k.shape[0]
        if cpu_ops.native_ok(q, k, v):
            one = torch.zeros(1, 1, dtype=torch.int32)
            return cpu_ops.paged_attention(q, k.contiguous().view(1, *k.shape), v.contiguous().view(1, *v.shape), one,
                                           torch.tensor([0, t], dtype=torch.int32),
                                           torch.tensor([s], dtype=torch.int32), self.cfg.head_dim ** -0.5)
        return _sdpa(q, k, v, torch.arange(s)[None, :] <= (torch.arange(t)[:, None] + s - t))  # mask [T, S]

    def _finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """x [T, D] residual, a [T, H, hd] attention output -> predicted g [T, D]."""
        cfg = self.cfg
        x = x + self.o_proj(a.reshape(x.shape[0], -1))
        h = rms_norm(x, self.post_norm, cfg.rms_eps)
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
        if cache is not None:
            k, v = cache.append(k, v)
        return self._finish(x, self._causal_cached(q, k, v))
