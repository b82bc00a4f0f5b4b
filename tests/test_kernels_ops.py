"""Elementwise kernels (rms_norm, rotary, silu_and_mul, store_kv) against their references,
through the Triton interpreter on CPU (conftest sets TRITON_INTERPRET=1 without CUDA)."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels._testing import assert_close_verbose

pytestmark = pytest.mark.unit
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=_gen(seed)) * scale).to(dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "dim"), [(1, 64), (7, 100), (3, 576)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_ref(dtype, tokens, dim, with_residual):
    x = _randn(tokens, dim, dtype=dtype, seed=1)
    w = _randn(dim, dtype=dtype, seed=2)
    res = _randn(tokens, dim, dtype=dtype, seed=3) if with_residual else None
    got = kernels.rms_norm(x, w, 1e-5, res, backend="triton")
    want = kernels.rms_norm_ref(x, w, 1e-5, res)
    if with_residual:
        assert_close_verbose(got[0], want[0], "rms_norm out")
        assert_close_verbose(got[1], want[1], "rms_norm residual")
    else:
        assert_close_verbose(got, want, "rms_norm")


def test_rms_norm_strided_rows():
    x = _randn(4, 96, dtype=torch.float32, seed=4)[:, :64]  # row stride 96 != 64
    w = _randn(64, dtype=torch.float32, seed=5)
    assert_close_verbose(kernels.rms_norm(x, w, 1e-6, backend="triton"), kernels.rms_norm_ref(x, w, 1e-6),
                         "rms_norm strided")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "inter"), [(1, 64), (5, 1500)])
def test_silu_and_mul_matches_ref(dtype, tokens, inter):
    x = _randn(tokens, 2 * inter, dtype=dtype, seed=6, scale=3.0)
    assert_close_verbose(kernels.silu_and_mul(x, backend="triton"), kernels.silu_and_mul_ref(x), "silu_and_mul")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("tokens", "hq", "hk", "dim"), [(1, 4, 4, 64), (5, 9, 3, 64), (3, 8, 1, 96)])
def test_rotary_matches_ref(dtype, tokens, hq, hk, dim):
    q = _randn(tokens, hq, dim, dtype=dtype, seed=7)
    k = _randn(tokens, hk, dim, dtype=dtype, seed=8)
    pos = torch.randint(0, 50, (tokens,), generator=_gen(9)).to(DEV)
    ang = torch.rand(50, dim // 2, generator=_gen(10)) * 6.28
    cos, sin = ang.cos().to(DEV), ang.sin().to(DEV)
    gq, gk = kernels.rotary(q, k, pos, cos, sin, backend="triton")
    wq, wk = kernels.rotary_ref(q, k, pos, cos, sin)
    assert_close_verbose(gq, wq, "rotary q")
    assert_close_verbose(gk, wk, "rotary k")


def test_rotary_strided_qk_from_fused_projection():
    qkv = _randn(4, (6 + 2 + 2) * 32, dtype=torch.float32, seed=11)
    q = qkv[:, : 6 * 32].view(4, 6, 32)
    k = qkv[:, 6 * 32 : 8 * 32].view(4, 2, 32)
    pos = torch.arange(4, device=DEV)
    ang = torch.rand(8, 16, generator=_gen(12))
    gq, gk = kernels.rotary(q, k, pos, ang.cos().to(DEV), ang.sin().to(DEV), backend="triton")
    wq, wk = kernels.rotary_ref(q, k, pos, ang.cos().to(DEV), ang.sin().to(DEV))
    assert_close_verbose(gq, wq, "rotary q strided")
    assert_close_verbose(gk, wk, "rotary k strided")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("block_size", "hk", "dim"), [(16, 2, 64), (32, 3, 80)])
def test_store_kv_matches_ref_and_skips_minus_one(dtype, block_size, hk, dim):
    nb, t = 6, 5
    kc = _randn(nb, block_size, hk, dim, dtype=dtype, seed=13)
    vc = _randn(nb, block_size, hk, dim, dtype=dtype, seed=14)
    k = _randn(t, hk, dim, dtype=dtype, seed=15)
    v = _randn(t, hk, dim, dtype=dtype, seed=16)
    slots = torch.tensor([3, -1, nb * block_size - 1, block_size, -1], device=DEV)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    kernels.store_kv(k, v, kc, vc, slots, backend="triton")
    kernels.store_kv_ref(k, v, kc_ref, vc_ref, slots)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


def _z(*shape, dtype=torch.float32):
    # on the kernels' device: on a CUDA machine a CPU tensor is refused before its shape is checked
    return torch.zeros(*shape, dtype=dtype, device=DEV)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: kernels.rms_norm(_z(2, 8), _z(9), 1e-5, backend="triton"), "weight"),
        (lambda: kernels.silu_and_mul(_z(2, 7), backend="triton"), "2I"),
        (lambda: kernels.rotary(_z(2, 2, 8), _z(2, 1, 8), _z(2, dtype=torch.long),
                                _z(4, 3), _z(4, 3), backend="triton"), "cos/sin"),
        (lambda: kernels.store_kv(_z(2, 1, 8), _z(2, 1, 8), _z(2, 4, 2, 8),
                                  _z(2, 4, 2, 8), _z(2, dtype=torch.long), backend="triton"),
         "caches"),
        (lambda: kernels.rms_norm(_z(2, 8, dtype=torch.int32), _z(8), 1e-5, backend="triton"),
         "dtype"),
    ],
)
def test_launchers_reject_bad_shapes_and_dtypes(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend"):
        kernels.rms_norm(torch.zeros(1, 8), torch.ones(8), 1e-5, backend="cuda")


def test_import_without_triton_runs_on_cpu_paths():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import torch, kernels\n"
        "x = torch.randn(2, 8)\n"
        # auto on CPU: the C++ op where it builds, else the reference; equal to an ulp either way
        "assert torch.allclose(kernels.rms_norm(x, torch.ones(8), 1e-5), kernels.rms_norm_ref(x, torch.ones(8), 1e-5),"
        " rtol=1e-6, atol=1e-6)\n"
        "try:\n    kernels.rms_norm(x, torch.ones(8), 1e-5, backend='triton')\n"
        "except RuntimeError as e:\n    print('refused:', e)\n"
    )
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]  # `-c` puts the cwd first on sys.path
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refused: kernel backend 'triton' requested but triton is not installed" in proc.stdout
