"""Write new keys and values into the paged KV cache at a slot mapping."""

from __future__ import annotations

import torch

from kernels._dispatch import use_triton


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


def store_kv(k, v, k_cache, v_cache, slot_mapping, *, backend: str = "auto") -> None:
    if use_triton(k, backend):
        raise NotImplementedError("Triton store_kv: see the kernels issue")
    store_kv_ref(k, v, k_cache, v_cache, slot_mapping)
