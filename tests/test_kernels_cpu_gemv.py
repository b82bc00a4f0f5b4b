"""kernels.cpu_gemv: the skinny CPU matmul against its float64 reference, its launcher's
checks, its build cache, and the engine Linear routes built on it."""

from __future__ import annotations

import os

import pytest
import torch

import kernels.cpu_native as native_mod
import llm_engine.linear as linear_mod
from kernels._testing import X86_BUILDS, assert_close_verbose
from kernels.cpu_gemv import (
    cpu_gemv,
    cpu_gemv_available,
    cpu_gemv_i8,
    cpu_gemv_i8_ref,
    cpu_gemv_q4,
    cpu_gemv_q4_ref,
    cpu_gemv_ref,
    dequantize_q4,
    quantize_q4,
    quantize_rows_ref,
)
from kernels.cpu_native import CSRC, NativeBuildError, build, cpu_flags
from llm_engine.linear import Linear

pytestmark = pytest.mark.unit


def _require_kernel():
    if not cpu_gemv_available():
        pytest.fail("the CPU gemv kernel did not build on this machine (a C++ compiler is part of the setup)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13, 24])  # > 8: prefill's 8-row chunks
@pytest.mark.parametrize("n, k", [(1, 16), (7, 37), (64, 576), (101, 80), (33, 1536), (5, 31), (101, 1536)])
def test_gemv_matches_ref(dtype, rows, n, k):
    _require_kernel()
    g = torch.Generator().manual_seed(rows * 1000 + n + k)
    x = torch.randn(rows, k, generator=g)
    w = torch.randn(n, k, generator=g).to(dtype)
    # fp32 sums of k products in another order: ~sqrt(k) * 1e-7 relative to the row norm
    assert_close_verbose(cpu_gemv(x, w), cpu_gemv_ref(x, w), f"gemv {dtype} {rows}x{k} @ {n}x{k}",
                         dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemv_threads_split_rows_without_changing_results(dtype):
    _require_kernel()
    x, w = torch.randn(3, 576), torch.randn(1001, 576).to(dtype)  # odd N: uneven thread ranges
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_gemv(x, w)
        torch.set_num_threads(2)
        two = cpu_gemv(x, w)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one, two)  # each output is one thread's sum either way


def _i8(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    return w, torch.rand(n, generator=g) + 0.01, w.to(torch.int32).sum(1).to(torch.int32)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("n, k", [(1, 64), (7, 37), (64, 576), (33, 1536), (9, 100)])
def test_gemv_i8_matches_ref(rows, n, k):
    _require_kernel()
    w, scale, wsum = _i8(n, k, rows + n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k))
    x[0, :] = 0.0 if rows > 1 else x[0, :]  # an all-zero row quantizes with scale 1, gives 0
    assert_close_verbose(cpu_gemv_i8(x, w, scale, wsum), cpu_gemv_i8_ref(x, w, scale), f"gemv_i8 {rows}x{k}",
                         dtype=torch.float32)


def test_gemv_i8_rows_and_threads_do_not_change_a_row():
    _require_kernel()
    w, scale, wsum = _i8(1001, 576, 0)
    x = torch.randn(20, 576)
    one = cpu_gemv_i8(x[:1], w, scale, wsum)
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for rows in (1, 3, 8, 9, 20):
                assert torch.equal(cpu_gemv_i8(x[:rows], w, scale, wsum)[:1], one), (threads, rows)
            many = cpu_gemv_i8(x, w, scale, wsum)  # 20 rows: 3 chunks of 8 against weight blocks
            assert all(torch.equal(many[i: i + 1], cpu_gemv_i8(x[i: i + 1], w, scale, wsum)) for i in range(20))
    finally:
        torch.set_num_threads(old)


def test_gemv_i8_rejects_bad_inputs():
    w, scale, wsum = _i8(4, 8, 0)
    with pytest.raises(ValueError, match="rows"):
        cpu_gemv_i8(torch.randn(0, 8), w, scale, wsum)
    with pytest.raises(ValueError, match="int8"):
        cpu_gemv_i8(torch.randn(1, 8), w.float(), scale, wsum)
    with pytest.raises(ValueError, match="wsum int32"):
        cpu_gemv_i8(torch.randn(1, 8), w, scale, wsum.long())


def _q4(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return quantize_q4(torch.randn(n, k, generator=g) * 0.05 + torch.randn(n, 1, generator=g) * 0.01)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("n, k", [(1, 32), (7, 64), (64, 576), (33, 1536)])
def test_gemv_q4_matches_ref(rows, n, k):
    _require_kernel()
    w, dm = _q4(n, k, rows + n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k))
    x[0, :] = 0.0 if rows > 1 else x[0, :]
    assert_close_verbose(cpu_gemv_q4(x, w, dm), cpu_gemv_q4_ref(x, w, dm), f"gemv_q4 {rows}x{k}",
                         dtype=torch.float32)


def test_gemv_q4_rows_and_threads_do_not_change_a_row():
    _require_kernel()
    w, dm = _q4(1001, 576, 0)
    x = torch.randn(20, 576)
    one = cpu_gemv_q4(x[:1], w, dm)
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            many = cpu_gemv_q4(x, w, dm)  # 20 rows: 3 chunks of 8 against weight blocks
            assert torch.equal(many[:1], one), threads
            assert all(torch.equal(many[i: i + 1], cpu_gemv_q4(x[i: i + 1], w, dm)) for i in range(20))
    finally:
        torch.set_num_threads(old)


def test_q4_gives_back_a_gguf_q4_1_tensor_exactly():
    """Weights that were Q4_1 (nibbles 0..15 with a fp16 scale and minimum per 32) quantize to
    the same nibbles and pairs: q4 runs a GGUF's own weights, where int8 rounds them again."""
    g = torch.Generator().manual_seed(3)
    q = torch.randint(0, 16, (40, 18, 32), generator=g)  # 18 blocks: a group and two on their own
    q[:, :, 0], q[:, :, 5] = 0, 15  # llama.cpp's quantizer puts each block's min and max at 0 and 15
    d = (torch.rand(40, 18, 1, generator=g) * 0.01 + 1e-4).half()
    m = (-torch.rand(40, 18, 1, generator=g) * 0.1).half()
    w = (d.float() * q + m.float()).reshape(40, 576)  # what gguf's dequantize gives
    nibbles, dm = quantize_q4(w)
    assert torch.equal(dequantize_q4(nibbles, dm), w)
    assert torch.equal(dm[:, 0], d[..., 0]) and torch.equal(dm[:, 1], m[..., 0])
    assert nibbles[0, 0] == q[0, 0, 0] | (q[0, 0, 4] << 4)  # a group: words 0 and 1 of block 0
    assert nibbles[0, 4] == q[0, 1, 0] | (q[0, 1, 4] << 4)  # ... then block 1's
    assert nibbles[0, 256] == q[0, 16, 0] | (q[0, 16, 16] << 4)  # after the group: GGUF's block layout
    flat = torch.zeros(2, 32)  # a constant block: scale 0, every weight its minimum
    assert torch.equal(dequantize_q4(*quantize_q4(flat)), flat)


def test_gemv_q4_rejects_bad_inputs():
    w, dm = _q4(4, 64, 0)
    for x, ww, dd, match in [(torch.randn(0, 64), w, dm, "M >= 1"), (torch.randn(1, 48), w, dm, "multiple of 32"),
                             (torch.randn(1, 64), w.to(torch.int8), dm, "uint8"),
                             (torch.randn(1, 64), w, dm.float(), "fp16"), (torch.randn(1, 64), w, dm[:2], "dm")]:
        with pytest.raises(ValueError, match=match):
            cpu_gemv_q4(x, ww, dd)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q4(torch.randn(2, 40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_scores_the_same_whatever_the_row_count(dtype):
    """Speculative verify (k+1 rows) must score a token exactly as decode (1 row) does, and a
    prefill (many rows, in 8-row chunks over blocks of weight rows) as either: a prompt's rows
    after a prefix-cache hit are a short pass, cold they are a long one."""
    _require_kernel()
    x, w = torch.randn(40, 1536), torch.randn(103, 1536).to(dtype)  # 103 rows: 3 weight blocks
    singles = torch.cat([cpu_gemv(x[i: i + 1], w) for i in range(40)])
    for rows in (2, 5, 8, 9, 17, 40):
        assert torch.equal(cpu_gemv(x[:rows], w), singles[:rows]), rows


def test_bf16_weights_round_activations_like_the_reference():
    _require_kernel()
    x = torch.full((1, 32), 1.0 + 2**-10)  # not representable in bf16: rounds to 1.0
    w = torch.ones(1, 32, dtype=torch.bfloat16)
    assert cpu_gemv(x, w).item() == 32.0
    assert cpu_gemv(x, w.float()).item() == pytest.approx(32 * (1 + 2**-10), rel=1e-7)


@pytest.mark.parametrize("x, w, match", [
    (torch.randn(0, 8), torch.randn(4, 8), "1 or more rows"),
    (torch.randn(2, 8), torch.randn(4, 9), r"x \[M, K\] and w \[N, K\]"),
    (torch.randn(2, 8).double(), torch.randn(4, 8), "fp32"),
    (torch.randn(2, 8), torch.randn(4, 8).half(), "fp32"),
    (torch.randn(2, 8), torch.randn(8, 4).t(), "contiguous"),
])
def test_launcher_rejects_bad_inputs(x, w, match):
    with pytest.raises(ValueError, match=match):
        cpu_gemv(x, w)


def test_build_is_cached_and_failures_are_typed(tmp_path, monkeypatch):
    out = tmp_path / "out"
    lib = build(CSRC / "cpu_gemv.cpp", out)
    stamp = os.stat(lib).st_mtime_ns
    assert build(CSRC / "cpu_gemv.cpp", out) == lib and os.stat(lib).st_mtime_ns == stamp  # no rebuild
    assert [p.name for p in out.iterdir()] == [lib.name]  # no temp file left behind
    monkeypatch.setenv("CXX", "false")  # a "compiler" that fails
    (tmp_path / "changed.cpp").write_text("int x;\n")
    with pytest.raises(NativeBuildError, match="false failed"):
        build(tmp_path / "changed.cpp", out)
    monkeypatch.setattr(native_mod, "_compiler", lambda: None)
    with pytest.raises(NativeBuildError, match="no C"):
        build(tmp_path / "changed.cpp", out)


def _lin(n_in, n_out, dtype, bias=False) -> Linear:
    torch.manual_seed(0)
    return Linear.converted(torch.nn.Linear(n_in, n_out, bias=bias), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_rows_agree_across_row_counts(dtype):
    """1 row and 19 rows (8-row chunks) both take cpu_gemv and give every row the same bits
    (oneDNN's GEMM sums in another order, and its bf16 output rounding would cost a bf16 ulp)."""
    _require_kernel()
    lin = _lin(576, 960, dtype, bias=True)
    x = torch.randn(19, 576)
    with torch.inference_mode():
        assert lin._route(x[:1]) == lin._route(x[:8]) == "gemv"
        assert lin._route(x) == "gemv"
        one, many = lin(x[:1]), lin(x)
        last = lin(x[-1:])
    assert one.dtype == many.dtype == torch.float32 and many.shape == (19, 960)
    assert torch.equal(one, many[:1]) and torch.equal(last, many[-1:])
    torch.testing.assert_close(many, (x @ lin.weight.float().t() if dtype == torch.float32 else
                                      x.to(dtype).float() @ lin.weight.float().t()) + lin.bias.float(),
                               rtol=1e-5, atol=1e-5)


def test_linear_without_the_kernel_takes_onednn(monkeypatch):
    monkeypatch.setattr(linear_mod, "cpu_gemv_available", lambda: False)
    lin = _lin(64, 32, torch.float32)
    x = torch.randn(1, 64)
    with torch.inference_mode():
        assert lin._route(x) == "onednn"
        torch.testing.assert_close(lin(x), x @ lin.weight.t())


def _variant(march: str, out, monkeypatch):
    """cpu_gemv.cpp built with `march` instead of -march=native (ctypes library)."""
    import ctypes

    flags = []
    for f in native_mod.FLAGS:
        flags += march.split() if f == "-march=native" else [f]
    monkeypatch.setattr(native_mod, "FLAGS", tuple(flags))
    return ctypes.CDLL(str(build(CSRC / "cpu_gemv.cpp", out)))


def _q4_rows(lib, w, dm, k):
    a = native_mod
    fn = a.bind(lib, "parley_gemv_q4", a.P, a.P, a.P, a.P, a.I64, a.I64, a.I64, a.I32)
    for rows in (*range(1, 9), 11, 19):
        x, y = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)), torch.empty(rows, w.shape[0])
        fn(x.data_ptr(), w.data_ptr(), dm.data_ptr(), y.data_ptr(), rows, w.shape[0], k, 2)
        yield rows, x, y


@pytest.mark.parametrize("march, needs, lanes", X86_BUILDS, ids=[b[0] for b in X86_BUILDS])
def test_other_cpu_builds_match_ref(march, needs, lanes, tmp_path, monkeypatch):
    """CPUs without AVX2 (plain C++ loops), with AVX2 but no AVX-512 (8-lane path, int8 by
    vpmaddubsw), or without AVX512-BF16 (bf16 widened to fp32): build those variants here and
    check them against the reference, at every row count (each takes its own rows-per-step)."""
    import ctypes
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the build flags below are x86-64 ones")
    host = cpu_flags()
    if not needs <= host:
        pytest.skip(f"this CPU lacks {sorted(needs - host)} to run a {march} build")
    lib = _variant(march, tmp_path, monkeypatch)
    native_lanes = 16 if "avx512f" in host else 8 if {"avx2", "fma"} <= host else 1
    assert lib.parley_gemv_lanes() == (lanes or native_lanes)
    a = native_mod
    for name, dtype in (("parley_gemv_f32", torch.float32), ("parley_gemv_bf16", torch.bfloat16)):
        fn = a.bind(lib, name, a.P, a.P, a.P, a.I64, a.I64, a.I64, a.I32)
        for rows in (*range(1, 9), 11, 19):
            x, w, y = torch.randn(rows, 37), torch.randn(13, 37).to(dtype), torch.empty(rows, 13)
            fn(x.data_ptr(), w.data_ptr(), y.data_ptr(), rows, 13, 37, 2)
            assert_close_verbose(y, cpu_gemv_ref(x, w), f"{march} {name} rows={rows}", dtype=torch.float32)
    fn = a.bind(lib, "parley_gemv_i8", a.P, a.P, a.P, a.P, a.P, a.I64, a.I64, a.I64, a.I32)
    w, scale, wsum = _i8(11, 100, 1)
    for rows in (*range(1, 9), 11, 19):
        x, y = torch.randn(rows, 100), torch.empty(rows, 11)
        fn(x.data_ptr(), w.data_ptr(), scale.data_ptr(), wsum.data_ptr(), y.data_ptr(), rows, 11, 100, 2)
        assert_close_verbose(y, cpu_gemv_i8_ref(x, w, scale), f"{march} gemv_i8 rows={rows}", dtype=torch.float32)
    w, dm = _q4(11, 576, 1)  # 18 blocks: a group of 16 interleaved, 2 in GGUF's layout
    for rows, x, y in _q4_rows(lib, w, dm, 576):
        assert_close_verbose(y, cpu_gemv_q4_ref(x, w, dm), f"{march} gemv_q4 rows={rows}", dtype=torch.float32)
    ctypes.CDLL(str(build(CSRC / "cpu_decode_ops.cpp", tmp_path)))  # the decode ops build there too


def test_q4_builds_without_vnni_give_the_same_bits(tmp_path, monkeypatch):
    """Plain loops and vpmaddubsw sum a q4 row in one order (VNNI pairs blocks: another)."""
    import platform

    if platform.machine() != "x86_64" or not {"avx2", "fma"} <= cpu_flags():
        pytest.skip("needs an x86-64 CPU with AVX2 to run both builds")
    w, dm = _q4(13, 1088, 2)  # 34 blocks: two groups and two on their own
    plain, avx2 = (list(_q4_rows(_variant(m, tmp_path / m[7:], monkeypatch), w, dm, 1088))
                   for m in ("-march=x86-64-v2", "-march=x86-64-v3"))
    assert all(torch.equal(p[2], q[2]) for p, q in zip(plain, avx2))


def _quantization_probe(k: int, rows: int = 5) -> torch.Tensor:
    """Rows whose quantization has half-way ties (a row with max 127 has scale 1: 2.5 -> 2,
    -3.5 -> -4), a zero row, the maximum in the vector part or in the scalar tail, and values
    around it."""
    g = torch.Generator().manual_seed(k)
    x = torch.randn(rows, k, generator=g) * 3
    x[1] = torch.tensor([2.5, -3.5, 0.5, -0.5, 1.5] * (k // 5 + 1))[:k]
    x[1, k // 2] = 127.0
    x[2] = 0.0
    x[3, -1] = 40.0  # the tail holds the row's largest magnitude
    return x


@pytest.mark.parametrize("march", ["native", *(b[0] for b in X86_BUILDS[:2])])
def test_activation_quantization_is_the_reference_bit_for_bit(march, tmp_path, monkeypatch):
    """y = x quantized, through an identity int8 weight with scale 1: exactly q * xs of
    quantize_rows_ref in every build (vector lanes and scalar tail alike)."""
    import platform

    a = native_mod
    if march == "native":
        _require_kernel()
        lib = a.library("cpu_gemv")
    else:
        needs = {"-march=x86-64-v3": {"avx2", "fma"}}.get(march, set())
        if platform.machine() != "x86_64" or not needs <= cpu_flags():
            pytest.skip(f"needs an x86-64 CPU with {sorted(needs)} for a {march} build")
        lib = _variant(march, tmp_path, monkeypatch)
    fn = a.bind(lib, "parley_gemv_i8", a.P, a.P, a.P, a.P, a.P, a.I64, a.I64, a.I64, a.I32)
    for k in (37, 100, 576):
        w = torch.eye(k, dtype=torch.int8)
        scale, wsum = torch.ones(k), torch.ones(k, dtype=torch.int32)
        x = _quantization_probe(k)
        y = torch.empty(x.shape[0], k)
        fn(x.data_ptr(), w.data_ptr(), scale.data_ptr(), wsum.data_ptr(), y.data_ptr(), x.shape[0], k, k, 1)
        q, xs = quantize_rows_ref(x)
        assert torch.equal(y, q * xs), (march, k)
        assert torch.equal(y[1, :4], torch.tensor([2.0, -4.0, 0.0, -0.0])), march  # ties to even
