"""Paged decode (single-pass and split-KV) and prefill/verify attention against the
references, through the Triton interpreter on CPU."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels._testing import assert_close_verbose
from kernels.decode_attention import choose_num_splits

pytestmark = pytest.mark.unit
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _paged_cache(ctx_lens, block_size, hk, dim, dtype, seed):
    """Caches with shuffled physical blocks, so the block table really indirects."""
    g = torch.Generator().manual_seed(seed)
    per_seq = [-(-c // block_size) + 1 for c in ctx_lens]  # one spare block per row
    mb = max(per_seq)
    nb = sum(per_seq) + 2
    kc = torch.randn(nb, block_size, hk, dim, generator=g).to(dtype=dtype, device=DEV)
    vc = torch.randn(nb, block_size, hk, dim, generator=g).to(dtype=dtype, device=DEV)
    perm = torch.randperm(nb, generator=g)
    table = torch.zeros(len(ctx_lens), mb, dtype=torch.int32)
    used = 0
    for b, n in enumerate(per_seq):
        table[b, :n] = perm[used : used + n].int()
        used += n
    ctx = torch.tensor(ctx_lens, dtype=torch.int32)
    return kc, vc, table.to(DEV), ctx.to(DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (6, 3), (8, 2), (8, 1)])  # GQA 1, 2, 4, 8
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_attention_matches_ref(dtype, block_size, hq, hk, num_splits):
    ctx_lens = [1, block_size + 3, 5 * block_size - 1]  # one block .. many blocks, ragged
    kc, vc, table, ctx = _paged_cache(ctx_lens, block_size, hk, 64, dtype, seed=hq * 10 + hk)
    q = torch.randn(len(ctx_lens), hq, 64, generator=torch.Generator().manual_seed(1)).to(dtype=dtype, device=DEV)
    got = kernels.decode_attention(q, kc, vc, table, ctx, 0.125, backend="triton", num_splits=num_splits)
    want = kernels.decode_attention_ref(q, kc, vc, table, ctx, 0.125)
    assert_close_verbose(got, want, f"decode splits={num_splits}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_attention_non_power_of_two_head_dim_and_auto_splits(dtype):
    kc, vc, table, ctx = _paged_cache([40, 7], 16, 2, 80, dtype, seed=3)
    q = torch.randn(2, 6, 80, generator=torch.Generator().manual_seed(2)).to(dtype=dtype, device=DEV)
    got = kernels.decode_attention(q, kc, vc, table, ctx, 80**-0.5, backend="triton")
    assert_close_verbose(got, kernels.decode_attention_ref(q, kc, vc, table, ctx, 80**-0.5), "decode d=80")


def test_split_heuristic_splits_only_long_underfilled_contexts():
    assert choose_num_splits(batch=1, kv_heads=8, max_context=256) == 1
    assert choose_num_splits(batch=64, kv_heads=8, max_context=32768) == 1  # 512 programs fill 132 SMs
    assert choose_num_splits(batch=1, kv_heads=8, max_context=4096) == 16
    assert choose_num_splits(batch=1, kv_heads=8, max_context=32768) == 33


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (8, 2), (8, 1)])
def test_prefill_attention_varlen_with_cached_prefix(dtype, block_size, hq, hk):
    # (new query tokens, total context): full prompt, chunk after a cached prefix, verify k+1=4
    runs = [(13, 13), (9, 2 * block_size + 9), (4, block_size + 1)]
    kc, vc, table, ctx = _paged_cache([c for _, c in runs], block_size, hk, 64, dtype, seed=hq + hk)
    cu = torch.tensor([0, *torch.cumsum(torch.tensor([n for n, _ in runs]), 0).tolist()], dtype=torch.int32,
                      device=DEV)
    q = torch.randn(int(cu[-1]), hq, 64, generator=torch.Generator().manual_seed(4)).to(dtype=dtype, device=DEV)
    got = kernels.prefill_attention(q, kc, vc, table, cu, ctx, 0.125, backend="triton")
    want = kernels.prefill_attention_ref(q, kc, vc, table, cu, ctx, 0.125)
    assert_close_verbose(got, want, "prefill")


def test_prefill_long_prompt_spans_unmasked_and_masked_tiles():
    runs = [(150, 150), (70, 200)]
    kc, vc, table, ctx = _paged_cache([c for _, c in runs], 16, 1, 32, torch.float16, seed=5)
    cu = torch.tensor([0, 150, 220], dtype=torch.int32, device=DEV)
    q = torch.randn(220, 2, 32, generator=torch.Generator().manual_seed(6)).to(dtype=torch.float16, device=DEV)
    got = kernels.prefill_attention(q, kc, vc, table, cu, ctx, 32**-0.5, backend="triton", max_q_len=150)
    assert_close_verbose(got, kernels.prefill_attention_ref(q, kc, vc, table, cu, ctx, 32**-0.5), "long prefill")


def test_verify_with_one_query_equals_decode():
    kc, vc, table, ctx = _paged_cache([33, 50], 16, 2, 64, torch.float32, seed=7)
    q = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(8)).to(DEV)
    cu = torch.arange(3, dtype=torch.int32, device=DEV)
    a = kernels.prefill_attention(q, kc, vc, table, cu, ctx, 0.125, backend="triton")
    b = kernels.decode_attention(q, kc, vc, table, ctx, 0.125, backend="triton")
    assert_close_verbose(a, b, "verify(k=0) vs decode")


def test_attention_rejects_mismatched_arguments():
    kc, vc, table, ctx = _paged_cache([5], 16, 2, 64, torch.float32, seed=9)
    with pytest.raises(ValueError, match="multiple"):
        kernels.decode_attention(torch.zeros(1, 3, 64, device=DEV), kc, vc, table, ctx, 1.0, backend="triton")
    with pytest.raises(ValueError, match="head dim"):
        kernels.decode_attention(torch.zeros(1, 4, 32, device=DEV), kc, vc, table, ctx, 1.0, backend="triton")
    with pytest.raises(ValueError, match="dtypes"):
        kernels.decode_attention(torch.zeros(1, 4, 64, dtype=torch.float16, device=DEV), kc, vc, table, ctx,
                                 1.0, backend="triton")
    with pytest.raises(ValueError, match="num_splits"):
        kernels.decode_attention(torch.zeros(1, 4, 64, device=DEV), kc, vc, table, ctx, 1.0, num_splits=0)
    with pytest.raises(ValueError, match="cu_seqlens"):
        kernels.prefill_attention(torch.zeros(1, 4, 64, device=DEV), kc, vc, table,
                                  torch.zeros(3, dtype=torch.int32, device=DEV), ctx, 1.0, backend="triton")
