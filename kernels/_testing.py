"""Helpers for the kernel tests: one verbose mismatch report per failure; the CPU builds to test."""

from __future__ import annotations

import torch

# (atol, rtol) against the fp32-computed references. fp16/bf16 kernels round p to the input
# dtype before the P.V product, a ~1e-3 (fp16) / ~8e-3 (bf16) relative step.
TOLERANCES = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-3, 1e-2),
    torch.bfloat16: (1.6e-2, 3e-2),
}


def assert_close_verbose(actual: torch.Tensor, expected: torch.Tensor, what: str,
                         dtype: torch.dtype | None = None) -> None:
    """Fails with max abs/rel error, the worst element's index and both values there."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    atol, rtol = TOLERANCES[dtype or expected.dtype]
    a, e = actual.float(), expected.float()
    if not torch.isfinite(a).all():
        bad = (~torch.isfinite(a)).nonzero()[0].tolist()
        raise AssertionError(f"{what}: non-finite output at {bad}: {a[tuple(bad)].item()}")
    err = (a - e).abs()
    excess = err - (atol + rtol * e.abs())
    if excess.numel() == 0 or excess.max() <= 0:
        return
    idx = tuple(torch.unravel_index(excess.argmax(), excess.shape))
    idx = tuple(int(i) for i in idx)
    rel = (err / e.abs().clamp_min(1e-6)).max().item()
    n_bad = int((excess > 0).sum())
    raise AssertionError(
        f"{what}: {n_bad}/{err.numel()} elements beyond atol={atol} rtol={rtol}; "
        f"max abs err {err.max().item():.3g}, max rel err {rel:.3g}; worst at {list(idx)}: "
        f"got {a[idx].item():.6g}, expected {e[idx].item():.6g}"
    )


# x86-64 builds of the CPU kernels the tests compile besides the native one: (-march, the host
# flags needed to run it, fp32 lanes of its gemv path; None = the native build's)
X86_BUILDS = [("-march=x86-64-v2", set(), 1), ("-march=x86-64-v3", {"avx2", "fma"}, 8),
              ("-march=native -mno-avx512bf16 -mno-avx512vnni", set(), None)]
