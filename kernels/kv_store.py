"""Write new keys and values into the paged KV cache at a slot mapping."""

from __future__ import annotations

import torch

from kernels import cpu_ops
from kernels._dispatch import use_cpu_native, use_triton
from kernels._triton import check, next_pow2, tl, triton, upcast_for_interpreter


def store_kv_ref(
    k: torch.Tensor,  # [T, Hk, D]
    v: torch.Tensor,  # [T, Hk, D]
    k_cache: torch.Tensor,  # [NB, BS, Hk, D]
    v_cache: torch.Tensor,  # [NB, BS, Hk, D]
    slot_mapping: torch.Tensor,  # [T] int64: block * BS + offset; -1 = do not store
) -> None:
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    kc = k_cache.view(-1, *k_cache.shape[2:])  # [NB*BS, Hk, D]
    vc = v_cache.view(-1, *v_cache.shape[2:])
    kc[slots] = k[keep].to(kc.dtype)
    vc[slots] = v[keep].to(vc.dtype)


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh, stride_slot,
    Hk, D,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # One program per token; the cache is contiguous so a slot is Hk*D consecutive elements.
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        offs_d = tl.arange(0, BLOCK_D)
        for h0 in range(0, Hk, BLOCK_H):
            offs_h = h0 + tl.arange(0, BLOCK_H)
            mask = (offs_h[:, None] < Hk) & (offs_d[None, :] < D)
            dst = slot * stride_slot + offs_h[:, None] * D + offs_d[None, :]
            kk = tl.load(k_ptr + t * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
            vv = tl.load(v_ptr + t * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
            tl.store(kc_ptr + dst, kk.to(kc_ptr.dtype.element_ty), mask=mask)
            tl.store(vc_ptr + dst, vv.to(vc_ptr.dtype.element_ty), mask=mask)


def _store_kv_triton(k, v, k_cache, v_cache, slot_mapping) -> None:
    check(k.dim() == 3 and k.shape == v.shape, f"store_kv: k, v [T, Hk, D] expected, got {tuple(k.shape)}, {tuple(v.shape)}")
    check(k_cache.dim() == 4 and k_cache.shape == v_cache.shape and tuple(k_cache.shape[2:]) == tuple(k.shape[1:]),
          f"store_kv: caches [NB, BS, {k.shape[1]}, {k.shape[2]}] expected, got {tuple(k_cache.shape)}")
    check(k_cache.is_contiguous() and v_cache.is_contiguous(), "store_kv: caches must be contiguous")
    check(k_cache.dtype == v_cache.dtype, "store_kv: k_cache and v_cache dtypes differ")
    check(k.stride(2) == 1 and v.stride(2) == 1, "store_kv: head dim must be contiguous")
    check(slot_mapping.shape == (k.shape[0],) and not slot_mapping.is_floating_point(),
          "store_kv: slot_mapping [T] int expected")
    if upcast_for_interpreter(k_cache.dtype) or upcast_for_interpreter(k.dtype):
        kc, vc = k_cache.float(), v_cache.float()
        _store_kv_triton(k.float(), v.float(), kc, vc, slot_mapping)
        k_cache.copy_(kc)
        v_cache.copy_(vc)
        return
    T, Hk, D = k.shape
    if T == 0:
        return
    block_d = next_pow2(D, 16)
    block_h = min(next_pow2(Hk), max(1, 4096 // block_d))
    _store_kv_kernel[(T,)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), Hk * D,
        Hk, D, BLOCK_H=block_h, BLOCK_D=block_d, num_warps=4,
    )


def store_kv(k, v, k_cache, v_cache, slot_mapping, *, backend: str = "auto") -> None:
    if use_triton(k, backend):
        _store_kv_triton(k, v, k_cache, v_cache, slot_mapping)
        return
    if use_cpu_native(backend, k, v, k_cache, v_cache):
        cpu_ops.store_kv(k, v, k_cache, v_cache, slot_mapping)
        return
    store_kv_ref(k, v, k_cache, v_cache, slot_mapping)
