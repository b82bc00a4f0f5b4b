"""Launchers for the C++ CPU decode ops (csrc/cpu_decode_ops.cpp): fp32 CPU tensors only.

The ops' public functions (kernels.rms_norm, .rotary, .store_kv) take these on
CPU fp32 tensors with backend "auto" when the library builds (`native_ok`); the `_ref`
functions stay the oracle and the fallback. `paged_attention` is the engine's CPU attention
for decode and speculative verify (few query rows per sequence, causal among them).
silu_and_mul stays in torch: its vectorized F.silu beat a scalar-expf loop (3.8 vs 6.2 us).
"""

from __future__ import annotations

import functools

import torch

from kernels._triton import check
from kernels.cpu_native import F32, I32, I64, P, bind, library, threads


@functools.cache
def _ops() -> dict | None:
    lib = library("cpu_decode_ops")
    if lib is None:
        return None
    return {
        "attn": bind(lib, "parley_paged_attention", P, P, P, P, P, P, P, I64, I64, I64, I64, I64, I64, F32, I32),
        "rotary": bind(lib, "parley_rotary", P, P, P, P, P, P, P, I64, I64, I64, I64, I64, I64),
        "store": bind(lib, "parley_store_kv", P, P, P, P, P, I64, I64, I64, I64),
        "rms": bind(lib, "parley_rms_norm", P, P, P, P, P, I64, I64, F32),
    }


def native_ok(*tensors: torch.Tensor) -> bool:
    """Every tensor on the CPU in fp32, outside autograd, and the library built."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return False
    return _ops() is not None


def _rows(t: torch.Tensor, what: str) -> int:
    """Row stride of a [T, H, D] view whose heads are contiguous at stride D."""
    check(t.dim() == 3 and t.stride(2) == 1 and t.stride(1) == t.shape[2], f"{what}: heads must be contiguous")
    return t.stride(0)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    x = x.contiguous()
    check(x.dim() == 2 and weight.shape == (x.shape[1],), "rms_norm: x [T, D] and weight [D] expected")
    out = torch.empty_like(x)
    res_out = None
    if residual is not None:
        check(residual.shape == x.shape, "rms_norm: residual must match x")
        residual = residual.contiguous()
        res_out = torch.empty_like(x)
    _ops()["rms"](x.data_ptr(), 0 if residual is None else residual.data_ptr(), weight.contiguous().data_ptr(),
                  out.data_ptr(), 0 if res_out is None else res_out.data_ptr(), x.shape[0], x.shape[1], eps)
    return out if residual is None else (out, res_out)


def rotary(q, k, positions, cos, sin):  # q [T, Hq, D], k [T, Hk, D] (views of a fused qkv)
    t, hq, d = q.shape
    check(k.shape[0] == t and k.shape[2] == d and d % 2 == 0, "rotary: q/k shapes disagree")
    check(cos.shape == sin.shape and cos.shape[1] == d // 2 and cos.is_contiguous() and sin.is_contiguous(),
          "rotary: cos/sin [P, D/2] contiguous expected")
    pos = positions.to(torch.int64).contiguous()
    if t and (int(pos.min()) < 0 or int(pos.max()) >= cos.shape[0]):
        raise ValueError(f"rotary: positions outside the table of {cos.shape[0]}")
    qo, ko = torch.empty(t, hq, d), torch.empty(t, k.shape[1], d)
    _ops()["rotary"](q.data_ptr(), k.data_ptr(), pos.data_ptr(), cos.data_ptr(), sin.data_ptr(), qo.data_ptr(),
                     ko.data_ptr(), t, hq, k.shape[1], d, _rows(q, "rotary q"), _rows(k, "rotary k"))
    return qo, ko


def store_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    t, hk, d = k.shape
    check(v.shape == k.shape and k_cache.shape == v_cache.shape and k_cache.shape[2:] == (hk, d),
          "store_kv: k/v [T, Hk, D] and caches [NB, BS, Hk, D] expected")
    check(k_cache.is_contiguous() and v_cache.is_contiguous(), "store_kv: caches must be contiguous")
    slots = slot_mapping.to(torch.int64).contiguous()
    if t and int(slots.max()) >= k_cache.shape[0] * k_cache.shape[1]:
        raise ValueError("store_kv: slot outside the cache")
    _ops()["store"](k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), t,
                    hk * d, _rows(k, "store_kv k"), _rows(v, "store_kv v"))


def paged_attention(
    q: torch.Tensor,  # [T, Hq, D]: each sequence's last q_len tokens, concatenated
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [B, MB] int32
    cu_seqlens_q: torch.Tensor,  # [B+1] int32
    context_lens: torch.Tensor,  # [B] int32, keys in cache (this step's tokens included)
    scale: float,
) -> torch.Tensor:  # [T, Hq, D]
    _, bs, hk, d = k_cache.shape
    check(q.dim() == 3 and q.shape[2] == d and q.shape[1] % hk == 0, "paged_attention: q [T, Hq, D] expected")
    check(k_cache.is_contiguous() and v_cache.is_contiguous(), "paged_attention: caches must be contiguous")
    tables = block_tables.to(torch.int32).contiguous()
    cu = cu_seqlens_q.to(torch.int32).contiguous()
    ctx = context_lens.to(torch.int32).contiguous()
    check(tables.shape[0] == ctx.shape[0] == cu.shape[0] - 1, "paged_attention: batch sizes disagree")
    q = q.contiguous()
    out = torch.empty_like(q)
    _ops()["attn"](q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), tables.data_ptr(), cu.data_ptr(),
                   ctx.data_ptr(), out.data_ptr(), ctx.shape[0], tables.shape[1], bs, q.shape[1], hk, d, scale,
                   threads())
    return out
