"""Ahead-of-time build of every kernel for NVIDIA targets, with no GPU present.

`python -m kernels.compile_check` compiles each kernel through `triton.compile` for sm_90
(Hopper) and sm_80 (Ampere) in fp16 and bf16, with the constexpr choices the launchers make
for a Llama-3-8B-shaped model (D=128, GQA 4, block size 16), and exits non-zero if any
fails. Must run WITHOUT TRITON_INTERPRET (the interpreter replaces the compiler).
"""

from __future__ import annotations

import argparse
import sys

TARGETS = ((90, 32), (80, 32))
DTYPES = ("fp16", "bf16")


def _specs(dt: str):
    """(kernel, pointer types, float params, constexprs, num_warps, num_stages) per kernel."""
    from kernels._attention_tile import LOG2E  # noqa: F401  (module must import cleanly)
    from kernels.decode_attention import _decode_attention_kernel, _decode_reduce_kernel
    from kernels.kv_store import _store_kv_kernel
    from kernels.prefill_attention import _prefill_attention_kernel
    from kernels.rms_norm import _rms_norm_kernel
    from kernels.rotary import _rotary_kernel
    from kernels.silu_and_mul import _silu_and_mul_kernel

    a = f"*{dt}"
    attn_ptrs = {"q_ptr": a, "k_cache": a, "v_cache": a, "bt_ptr": "*i32", "ctx_ptr": "*i32", "out_ptr": a}
    tiles = {"BLOCK_N": 64, "BLOCK_D": 128, "BLOCK_SIZE": 16, "EVEN_D": True, "DOT_PREC": "tf32"}
    return [
        (_rms_norm_kernel, dict.fromkeys(("x_ptr", "res_ptr", "w_ptr", "out_ptr", "res_out_ptr"), a),
         {"eps"}, {"BLOCK_D": 4096, "HAS_RES": True}, 8, 1),
        (_silu_and_mul_kernel, {"x_ptr": a, "out_ptr": a}, set(), {"BLOCK": 1024}, 4, 1),
        (_rotary_kernel, {**dict.fromkeys(("q_ptr", "k_ptr", "qo_ptr", "ko_ptr"), a), "pos_ptr": "*i64",
                          "cos_ptr": "*fp32", "sin_ptr": "*fp32"}, set(), {"BLOCK_HALF": 64, "BLOCK_H": 32}, 4, 1),
        (_store_kv_kernel, {**dict.fromkeys(("k_ptr", "v_ptr", "kc_ptr", "vc_ptr"), a), "slot_ptr": "*i64"},
         set(), {"BLOCK_H": 8, "BLOCK_D": 128}, 4, 1),
        (_decode_attention_kernel, {**attn_ptrs, "part_ptr": "*fp32", "lse_ptr": "*fp32"}, {"qk_scale"},
         {**tiles, "BLOCK_G": 16, "NUM_SPLITS": 16}, 4, 3),
        (_decode_attention_kernel, {**attn_ptrs, "part_ptr": a, "lse_ptr": a}, {"qk_scale"},
         {**tiles, "BLOCK_G": 16, "NUM_SPLITS": 1}, 4, 3),
        (_decode_reduce_kernel, {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": a}, set(),
         {"NUM_SPLITS": 16, "BLOCK_S": 16, "BLOCK_D": 128}, 4, 1),
        (_prefill_attention_kernel, {**attn_ptrs, "cu_ptr": "*i32"}, {"qk_scale"}, {**tiles, "BLOCK_M": 64}, 4, 3),
    ]


def compile_one(kernel, ptrs, floats, constexprs, target, num_warps, num_stages):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {}
    for name in kernel.arg_names:
        sig[name] = "constexpr" if name in constexprs else ptrs.get(name, "fp32" if name in floats else "i32")
    src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", target[0], target[1]),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, nargs="*", default=[t[0] for t in TARGETS])
    args = p.parse_args(argv)
    failures = []
    for arch in args.arch:
        for dt in DTYPES:
            for kernel, ptrs, floats, consts, warps, stages in _specs(dt):
                label = f"sm_{arch} {dt} {kernel.__name__} {consts}"
                try:
                    compiled = compile_one(kernel, ptrs, floats, consts, (arch, 32), warps, stages)
                    print(f"ok   {label} shared={compiled.metadata.shared}B")
                except Exception as e:  # report every failing build, not only the first
                    failures.append(label)
                    print(f"FAIL {label}: {type(e).__name__}: {str(e)[:2000]}")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
