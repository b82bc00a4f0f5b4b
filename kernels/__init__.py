"""The engine's hot ops. Each op: a Triton kernel, a launcher, and a plain-torch `_ref`.
Importing this package never needs a GPU. `backend` ("auto" | "triton" | "torch") is an
explicit argument of every op (see kernels._dispatch)."""

from kernels._dispatch import BACKENDS
from kernels.decode_attention import decode_attention, decode_attention_ref
from kernels.kv_store import store_kv, store_kv_ref
from kernels.prefill_attention import prefill_attention, prefill_attention_ref
from kernels.rms_norm import rms_norm, rms_norm_ref
from kernels.rotary import rotary, rotary_ref
from kernels.silu_and_mul import silu_and_mul, silu_and_mul_ref

__all__ = [
    "BACKENDS",
    "decode_attention",
    "decode_attention_ref",
    "prefill_attention",
    "prefill_attention_ref",
    "rms_norm",
    "rms_norm_ref",
    "rotary",
    "rotary_ref",
    "silu_and_mul",
    "silu_and_mul_ref",
    "store_kv",
    "store_kv_ref",
]
