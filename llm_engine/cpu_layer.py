"""A whole decoder layer in one C++ call for every CPU step, decode, verify and prefill alike
(kernels/csrc/cpu_decode_layer.cpp): the per-op path's kernels without its ~80 us of Python and
dispatch per layer (2.4 ms of a 19 ms fp32 SmolLM2 step on the dev machine). FusedStack goes
one further: every layer of the step in one call (see its doc).

Prefill takes it too, so that a prompt row is computed by the same arithmetic whether it is
prefilled with hundreds of others (a cold prompt) or with a few (the uncached tail after a
prefix-cache hit, a verify pass): before, prefill ran the per-op path (oneDNN's fp32 GEMM,
torch's attention and silu), and the int8 voice default's greedy reply after a prefix hit
left the cold reply's path on 6 of the 8 benchmark prompts (2 at the first token).

`FusedLayer.forward` returns None whenever the step is not one it covers (CUDA, autograd,
weights the gemv kernel cannot take); the caller then runs the per-op path.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from kernels.cpu_native import library, threads
from llm_engine.attention_metadata import AttentionMetadata
from llm_engine.linear import Linear
from llm_engine.quant import Int8Linear, Q4Linear

_P, _I64, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


class _Linear(ctypes.Structure):
    _fields_ = [("w", _P), ("scale", _P), ("wsum", _P)]


class _Weights(ctypes.Structure):
    _fields_ = [("qkv", _Linear), ("o", _Linear), ("gate_up", _Linear), ("down", _Linear), ("b_qkv", _P),
                ("input_norm", _P), ("post_norm", _P), ("wtype", _I64), ("hidden", _I64), ("hq", _I64),
                ("hk", _I64), ("d", _I64), ("inter", _I64), ("eps", _F), ("scale", _F)]


WTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2, torch.uint8: 3}  # uint8: q4 nibbles


def _linear_ok(lin, dtype) -> bool:
    """A linear the kernel takes: our Linear on the auto route, an Int8Linear or a Q4Linear."""
    w = lin.weight
    if w.dtype != dtype or not w.is_contiguous() or w.device.type != "cpu":
        return False
    if dtype == torch.int8:
        return isinstance(lin, Int8Linear)
    if dtype == torch.uint8:
        return isinstance(lin, Q4Linear)
    return isinstance(lin, Linear) and lin.backend == "auto"


def _linear_struct(lin) -> _Linear:
    if isinstance(lin, Int8Linear):
        return _Linear(lin.weight.data_ptr(), lin.scale.data_ptr(), lin.wsum.data_ptr())
    if isinstance(lin, Q4Linear):
        return _Linear(lin.weight.data_ptr(), lin.dm.data_ptr(), 0)
    return _Linear(lin.weight.data_ptr(), 0, 0)


class _Step(ctypes.Structure):
    _fields_ = [("positions", _P), ("slots", _P), ("cos", _P), ("sin", _P), ("tables", _P), ("cu", _P),
                ("ctx", _P), ("T", _I64), ("B", _I64), ("max_blocks", _I64), ("block_size", _I64),
                ("threads", _I64)]


@functools.cache
def _kernel():
    lib = library("cpu_decode_layer")
    if lib is None:
        return None
    fn = lib.parley_decode_layer
    fn.argtypes, fn.restype = [ctypes.POINTER(_Weights), ctypes.POINTER(_Step)] + [_P] * 6, None
    return fn


@functools.cache
def _stack_kernel():
    lib = library("cpu_decode_layer")
    if lib is None:
        return None
    fn = lib.parley_decode_layers
    fn.argtypes = [ctypes.POINTER(ctypes.POINTER(_Weights)), _I64, ctypes.POINTER(_Step), ctypes.POINTER(_P),
                   ctypes.POINTER(_P), _P, _P, _P]
    fn.restype = None
    return fn


def step_struct(meta: AttentionMetadata, cos: torch.Tensor, sin: torch.Tensor, block_size: int
                ) -> tuple[_Step, list[torch.Tensor]]:
    """The step's metadata for every layer (built once per forward); -> (struct, tensors it
    points into, to keep alive)."""
    keep = [meta.positions.to(torch.int64).contiguous(), meta.slot_mapping.to(torch.int64).contiguous(),
            cos.contiguous(), sin.contiguous(), meta.block_tables.to(torch.int32).contiguous(),
            meta.cu_seqlens_q.to(torch.int32).contiguous(), meta.context_lens.to(torch.int32).contiguous()]
    s = _Step(*(t.data_ptr() for t in keep), meta.num_tokens, meta.num_seqs, keep[4].shape[1], block_size,
              threads())
    return s, keep


def fused_kernel_available() -> bool:
    return _kernel() is not None


class FusedLayer:
    """One DecoderLayer's weight pointers for the kernel (re-read when a weight's storage
    changes: .to(), a new weight format)."""

    def __init__(self) -> None:
        self._key = None
        self._weights: _Weights | None = None
        self._bias: torch.Tensor | None = None  # an fp32 copy of a bf16 q/k/v bias

    def _struct(self, ly) -> _Weights | None:
        lins = (ly.qkv_proj, ly.o_proj, ly.gate_up_proj, ly.down_proj)
        key = tuple((type(lin), lin.weight.data_ptr(), lin.weight.dtype, getattr(lin, "backend", None)) for lin in lins)
        if key == self._key:
            return self._weights
        self._key, self._weights = key, None
        dtype = lins[0].weight.dtype
        ok = (dtype in WTYPES and all(_linear_ok(lin, dtype) for lin in lins)
              and all(lin.bias is None for lin in lins[1:])
              and ly.input_norm.dtype == ly.post_norm.dtype == torch.float32)
        if ok and _kernel() is not None:
            b = ly.qkv_proj.bias
            if b is not None and b.dtype != torch.float32:
                self._bias = b.float().contiguous()  # kept alive with the struct
                b = self._bias
            self._weights = _Weights(*(_linear_struct(lin) for lin in lins), 0 if b is None else b.data_ptr(),
                                     ly.input_norm.data_ptr(), ly.post_norm.data_ptr(), WTYPES[dtype],
                                     ly.input_norm.shape[0], ly.hq, ly.hk, ly.d, ly.down_proj.in_features, ly.eps,
                                     ly.scale)
        return self._weights

    def forward(self, ly, h: torch.Tensor, residual: torch.Tensor | None, step: _Step | None,
                kv: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """h, residual [T, H] -> (h, residual) of the layer, or None (not covered)."""
        if step is None or h.dtype != torch.float32 or torch.is_grad_enabled():
            return None
        k_cache, v_cache = kv
        if k_cache.dtype != torch.float32 or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            return None
        w = self._struct(ly)
        if w is None:
            return None
        h = h.contiguous()
        if residual is not None:
            residual = residual.contiguous()
        h_out, res_out = torch.empty_like(h), torch.empty_like(h)
        _kernel()(ctypes.byref(w), ctypes.byref(step), k_cache.data_ptr(), v_cache.data_ptr(), h.data_ptr(),
                  0 if residual is None else residual.data_ptr(), h_out.data_ptr(), res_out.data_ptr())
        return h_out, res_out  # first layer too: res_out = o_proj(attn) + h, as the per-op path


_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


class FusedStack:
    """Every decoder layer of a step in one C++ call (parley_decode_layers), each layer's arithmetic
    its FusedLayer's. A call per layer cost ~90 us of Python once the step's weight stream had
    evicted the interpreter's data: with one call, int8 SmolLM2-135M streaming decode went from
    58.0 to 68.8 tok/s, q4 from 73.5 to 89.2 (`python -m benchmarks.cpu_layer_stack`, model 167
    Xeon, 1 thread, side by side in one process). The layers' weight structs are rebuilt
    (through each FusedLayer, which checks them) only when a linear module or its weight's
    storage changes; the check reads the module dicts directly (nn.Module attribute access
    tripled its cost)."""

    def __init__(self) -> None:
        self._key: list | None = None
        self._structs: list[_Weights] | None = None
        self._array = None  # ctypes array of pointers to self._structs

    @staticmethod
    def _layer_key(ly) -> list:
        out = []
        for name in _LINEARS:
            lin = ly._modules[name]
            w = lin._parameters.get("weight")
            if w is None:
                w = lin._buffers["weight"]
            out += (id(lin), w.data_ptr(), lin.__dict__.get("backend"))
        return out

    def _weights(self, layers):
        key = [x for ly in layers for x in self._layer_key(ly)]
        if key != self._key:  # the key last: a reader never pairs the new key with the old array
            structs = [ly.fused._struct(ly) for ly in layers]
            ok = all(w is not None for w in structs)
            self._structs = structs if ok else None
            self._array = (ctypes.POINTER(_Weights) * len(structs))(*map(ctypes.pointer, structs)) if ok else None
            self._key = key
        return self._array

    def forward(self, layers, h: torch.Tensor, step: _Step | None, kv_caches
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """h [T, H] (the embeddings) -> the last layer's (h, residual), or None (not covered:
        the caller runs the layers one by one)."""
        if step is None or h.dtype != torch.float32 or torch.is_grad_enabled() or _stack_kernel() is None:
            return None
        for k_cache, v_cache in kv_caches:
            if k_cache.dtype != torch.float32 or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
                return None
        array = self._weights(layers)
        if array is None:
            return None
        n = len(layers)
        kcs = (_P * n)(*(k.data_ptr() for k, _ in kv_caches))
        vcs = (_P * n)(*(v.data_ptr() for _, v in kv_caches))
        h = h.contiguous()
        h_out, res_out = torch.empty_like(h), torch.empty_like(h)
        _stack_kernel()(array, n, ctypes.byref(step), kcs, vcs, h.data_ptr(), h_out.data_ptr(), res_out.data_ptr())
        return h_out, res_out
