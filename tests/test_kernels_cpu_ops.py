"""kernels.cpu_ops (C++ CPU decode ops) against the torch references, and their dispatch."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels import cpu_ops
from kernels._testing import X86_BUILDS, assert_close_verbose
from kernels.cpu_native import cpu_flags
from kernels.prefill_attention import prefill_attention_ref

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _built():
    if cpu_ops._ops() is None:
        pytest.fail("the C++ CPU ops did not build on this machine (a C++ compiler is part of the setup)")


def _g(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("tokens, dim", [(1, 576), (3, 37), (17, 64), (2, 1000)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(tokens, dim, with_residual):
    g = _g(tokens * dim)
    x, w = torch.randn(tokens, dim, generator=g), torch.randn(dim, generator=g)
    res = torch.randn(tokens, dim, generator=g) if with_residual else None
    got, ref = cpu_ops.rms_norm(x, w, 1e-5, res), kernels.rms_norm_ref(x, w, 1e-5, res)
    if with_residual:
        assert_close_verbose(got[0], ref[0], "rms_norm out")
        assert torch.equal(got[1], ref[1])  # x + residual, exactly
    else:
        assert_close_verbose(got, ref, "rms_norm")


@pytest.mark.parametrize("tokens, hq, hk, d", [(1, 9, 3, 64), (5, 8, 8, 32), (3, 12, 2, 96), (2, 4, 1, 10)])
def test_rotary_on_fused_qkv_views(tokens, hq, hk, d):
    g = _g(tokens + hq)
    qkv = torch.randn(tokens, (hq + 2 * hk) * d, generator=g)
    q, k, _ = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    q, k = q.view(tokens, hq, d), k.view(tokens, hk, d)  # strided rows, as the model passes them
    cos, sin = torch.randn(300, d // 2, generator=g), torch.randn(300, d // 2, generator=g)
    pos = torch.randint(0, 300, (tokens,), generator=g)
    (gq, gk), (rq, rk) = cpu_ops.rotary(q, k, pos, cos, sin), kernels.rotary_ref(q, k, pos, cos, sin)
    assert_close_verbose(gq, rq, "rotary q")
    assert_close_verbose(gk, rk, "rotary k")
    with pytest.raises(ValueError, match="positions outside"):
        cpu_ops.rotary(q, k, pos + 300, cos, sin)


@pytest.mark.parametrize("block_size", [16, 32])
def test_store_kv_skips_minus_one(block_size):
    g = _g(block_size)
    t, hk, d = 5, 3, 64
    kv = torch.randn(t, 2 * hk * d, generator=g)
    k, v = (a.view(t, hk, d) for a in kv.split([hk * d, hk * d], dim=-1))
    caches = [torch.zeros(6, block_size, hk, d) for _ in range(4)]
    slots = torch.tensor([0, -1, block_size + 3, 5 * block_size, -1])
    cpu_ops.store_kv(k, v, caches[0], caches[1], slots)
    kernels.store_kv_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    with pytest.raises(ValueError, match="slot outside"):
        cpu_ops.store_kv(k, v, caches[0], caches[1], slots + 6 * block_size)


def _paged(g, lens, block_size, hk, d, num_blocks=40):
    kc = torch.randn(num_blocks, block_size, hk, d, generator=g)
    vc = torch.randn(num_blocks, block_size, hk, d, generator=g)
    perm = torch.randperm(num_blocks, generator=g)  # scattered blocks
    mb = max(-(-n // block_size) for n in lens)
    tables = torch.zeros(len(lens), mb, dtype=torch.int32)
    used = 0
    for b, n in enumerate(lens):
        nb = -(-n // block_size)
        tables[b, :nb] = perm[used : used + nb].to(torch.int32)
        used += nb
    return kc, vc, tables


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("q_lens, ctx", [((1,), (1,)), ((1,), (100,)), ((1, 1, 1), (17, 300, 33)),
                                        ((4, 1, 6), (40, 129, 6)), ((17,), (200,))])
def test_paged_attention_matches_ref(group, block_size, q_lens, ctx):
    g = _g(group * 100 + block_size + sum(ctx))
    hk, d = 2, 64
    kc, vc, tables = _paged(g, ctx, block_size, hk, d)
    q = torch.randn(sum(q_lens), hk * group, d, generator=g)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(ctx, dtype=torch.int32)
    got = cpu_ops.paged_attention(q, kc, vc, tables, cu, lens, d**-0.5)
    ref = prefill_attention_ref(q, kc, vc, tables, cu, lens, d**-0.5)
    assert_close_verbose(got, ref, f"paged attention g={group} bs={block_size} q={q_lens} ctx={ctx}")


@pytest.mark.parametrize("d", [16, 40, 48, 128])  # AVX-512: 40 scalar, others grouped; AVX2: 128 scalar
def test_paged_attention_head_sizes(d):
    g = _g(d)
    kc, vc, tables = _paged(g, (37, 70), 16, 2, d)
    q = torch.randn(7, 6, d, generator=g)
    cu, lens = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([37, 70], dtype=torch.int32)
    got = cpu_ops.paged_attention(q, kc, vc, tables, cu, lens, d**-0.5)
    assert_close_verbose(got, prefill_attention_ref(q, kc, vc, tables, cu, lens, d**-0.5), f"paged attention d={d}")


@pytest.mark.parametrize("n", [2, 5, 8])
def test_paged_attention_row_does_not_depend_on_verify_width(n):
    """Row i of an n-row verify pass equals the 1-row decode of that position bit for bit:
    what keeps greedy speculative output identical to plain decoding."""
    g = _g(n)
    kc, vc, tables = _paged(g, (150,), 16, 3, 64)
    q = torch.randn(n, 9, 64, generator=g)
    wide = cpu_ops.paged_attention(q, kc, vc, tables, torch.tensor([0, n], dtype=torch.int32),
                                   torch.tensor([150], dtype=torch.int32), 0.125)
    for i in range(n):
        one = cpu_ops.paged_attention(q[i : i + 1], kc, vc, tables, torch.tensor([0, 1], dtype=torch.int32),
                                      torch.tensor([150 - n + 1 + i], dtype=torch.int32), 0.125)
        assert torch.equal(wide[i], one[0]), f"row {i} of {n}"


@pytest.mark.parametrize("threads", [1, 2])
def test_paged_attention_threads_agree(threads):
    g = _g(7)
    kc, vc, tables = _paged(g, (90, 50), 16, 3, 64)
    q = torch.randn(2, 9, 64, generator=g)
    args = (q, kc, vc, tables, torch.tensor([0, 1, 2], dtype=torch.int32), torch.tensor([90, 50], dtype=torch.int32),
            0.125)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_ops.paged_attention(*args)
        torch.set_num_threads(threads)
        assert torch.equal(cpu_ops.paged_attention(*args), one)
    finally:
        torch.set_num_threads(old)


def test_dispatch_takes_native_on_auto_only(monkeypatch):
    calls = []
    real = cpu_ops.rms_norm
    monkeypatch.setattr(cpu_ops, "rms_norm", lambda *a: calls.append(1) or real(*a))
    x, w = torch.randn(2, 8), torch.ones(8)
    kernels.rms_norm(x, w, 1e-6, backend="torch")
    assert not calls
    kernels.rms_norm(x, w, 1e-6, backend="auto")
    assert calls
    assert not cpu_ops.native_ok(x.half()) and not cpu_ops.native_ok(torch.randn(2, requires_grad=True))


@pytest.mark.parametrize("march, needs", [b[:2] for b in X86_BUILDS], ids=[b[0] for b in X86_BUILDS])
@pytest.mark.parametrize("d", [40, 64])
def test_paged_attention_other_builds_match_ref(march, needs, d, tmp_path, monkeypatch):
    """A CPU without AVX2 takes the scalar per-row attention, one with AVX2 but no AVX-512 the
    8-lane grouped kernel: build those variants here and check them against the reference, and
    that a verify row equals its 1-row decode bit for bit there too."""
    import ctypes
    import platform

    from kernels import cpu_native

    if platform.machine() != "x86_64":
        pytest.skip("the build flags below are x86-64 ones")
    if not needs <= cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(needs - cpu_flags())} to run a {march} build")
    flags = []
    for f in cpu_native.FLAGS:
        flags += march.split() if f == "-march=native" else [f]
    monkeypatch.setattr(cpu_native, "FLAGS", tuple(flags))
    lib = ctypes.CDLL(str(cpu_native.build(cpu_native.CSRC / "cpu_decode_ops.cpp", tmp_path)))
    a = cpu_native
    fn = a.bind(lib, "parley_paged_attention", a.P, a.P, a.P, a.P, a.P, a.P, a.P, a.I64, a.I64, a.I64, a.I64,
                a.I64, a.I64, a.F32, a.I32)

    def attend(q, cu, lens):
        out = torch.empty_like(q)
        fn(q.data_ptr(), kc.data_ptr(), vc.data_ptr(), tables.data_ptr(), cu.data_ptr(), lens.data_ptr(),
           out.data_ptr(), len(lens), tables.shape[1], 16, 6, 2, d, d**-0.5, 1)
        return out

    g = _g(11)
    kc, vc, tables = _paged(g, (37, 70), 16, 2, d)
    q = torch.randn(7, 6, d, generator=g)
    cu, lens = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([37, 70], dtype=torch.int32)
    out = attend(q, cu, lens)
    assert_close_verbose(out, prefill_attention_ref(q, kc, vc, tables, cu, lens, d**-0.5), f"{march} d={d}")
    for i in range(3):  # sequence 0's verify rows, one at a time
        one = attend(q[i : i + 1].contiguous(), torch.tensor([0, 1], dtype=torch.int32),
                     torch.tensor([37 - 3 + 1 + i], dtype=torch.int32))
        assert torch.equal(out[i], one[0]), f"{march} d={d}: verify row {i}"
