"""A Llama-family decoder (Llama 2/3, GQA, Llama-3 rope scaling, tied embeddings, Qwen2 q/k/v bias).

Every per-layer op goes through `kernels` with the backend the engine config gives. The
forward takes a flattened batch (see AttentionMetadata) and returns the final hidden states
of every token; `compute_logits` projects only the rows the caller selects.
"""

from __future__ import annotations

import torch
from torch import nn

import kernels
from llm_engine.attention_metadata import AttentionMetadata
from llm_engine.config import ModelConfig
from llm_engine.cpu_attention import cpu_attention
from llm_engine.cpu_layer import FusedLayer, FusedStack, fused_kernel_available, step_struct
from llm_engine.linear import Linear
from llm_engine.rope import rope_tables


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.hq, self.hk, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        h = cfg.hidden_size
        # q, k, v fused into one matmul, gate/up into another: 2 weight reads instead of 5.
        self.qkv_proj = Linear(h, (self.hq + 2 * self.hk) * self.d, bias=cfg.attention_bias)
        self.o_proj = Linear(self.hq * self.d, h, bias=False)
        self.gate_up_proj = Linear(h, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, h, bias=False)
        self.input_norm = nn.Parameter(torch.ones(h))
        self.post_norm = nn.Parameter(torch.ones(h))
        self.scale = self.d**-0.5
        self.sdpa_decode = True  # CPU decode/verify via llm_engine.cpu_attention; False: kernels' dispatch
        self.fused = FusedLayer()  # the whole layer in one C++ call on CPU decode/verify steps

    def forward(self, h, residual, meta: AttentionMetadata, kv, cos, sin, backend: str, step=None):
        # h, residual: [T, H]; kv: (k_cache, v_cache) each [NB, BS, Hk, D]; step: the fused
        # CPU kernel's metadata (LlamaModel.forward builds it when the step qualifies)
        out = self.fused.forward(self, h, residual, step, kv)
        if out is not None:
            return out
        if residual is None:
            residual = h
            h = kernels.rms_norm(h, self.input_norm, self.eps, backend=backend)
        else:
            h, residual = kernels.rms_norm(h, self.input_norm, self.eps, residual, backend=backend)
        t = h.shape[0]
        qkv = self.qkv_proj(h)  # [T, (Hq + 2Hk) * D]
        q, k, v = qkv.split([self.hq * self.d, self.hk * self.d, self.hk * self.d], dim=-1)
        q = q.view(t, self.hq, self.d)
        k = k.view(t, self.hk, self.d)
        v = v.view(t, self.hk, self.d)
        q, k = kernels.rotary(q, k, meta.positions, cos, sin, backend=backend)
        k_cache, v_cache = kv
        kernels.store_kv(k, v, k_cache, v_cache, meta.slot_mapping, backend=backend)
        # the CPU fast path is a reference speed-up: an explicit "triton" backend bypasses it
        o = None
        if self.sdpa_decode and backend != "triton" and not q.is_cuda:
            o = cpu_attention(q, k_cache, v_cache, meta, self.scale, backend)
        if o is None and meta.is_decode:
            o = kernels.decode_attention(q, k_cache, v_cache, meta.block_tables, meta.context_lens,
                                         self.scale, backend=backend)
        elif o is None:
            o = kernels.prefill_attention(q, k_cache, v_cache, meta.block_tables, meta.cu_seqlens_q,
                                          meta.context_lens, self.scale, backend=backend)
        h = self.o_proj(o.reshape(t, self.hq * self.d))
        h, residual = kernels.rms_norm(h, self.post_norm, self.eps, residual, backend=backend)
        h = self.down_proj(kernels.silu_and_mul(self.gate_up_proj(h), backend=backend))
        return h, residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig, max_len: int, backend: str = "auto", sdpa_decode: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.backend = backend
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        for layer in self.layers:
            layer.sdpa_decode = sdpa_decode
        self.cpu_fused_layers = True  # False: the per-op path on CPU decode steps too (tests)
        # every layer in one C++ call when every layer is covered; None: one call per layer
        self.fused_stack: FusedStack | None = FusedStack()
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        with torch.device("cpu"):  # real tables even when the module is built on "meta"
            cos, sin = rope_tables(cfg, max_len, torch.device("cpu"))
        self.register_buffer("cos", cos, persistent=False)  # [P, D/2]
        self.register_buffer("sin", sin, persistent=False)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64
        meta: AttentionMetadata,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        return_prenorm: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # [T, H] final-normed hidden states
        """return_prenorm: also return the last layer's output before the final norm, [T, H]
        (the feature the speculative EAGLE head drafts from)."""
        h = self.embed_tokens(input_ids)
        residual = None
        step, _keep = self._fused_step(input_ids, meta, kv_caches)
        out = None if self.fused_stack is None else self.fused_stack.forward(self.layers, h, step, kv_caches)
        if out is not None:
            h, residual = out
        else:
            for layer, kv in zip(self.layers, kv_caches):
                h, residual = layer(h, residual, meta, kv, self.cos, self.sin, self.backend, step)
        h, prenorm = kernels.rms_norm(h, self.norm, self.cfg.rms_norm_eps, residual, backend=self.backend)
        return (h, prenorm) if return_prenorm else h

    def _fused_step(self, input_ids, meta, kv_caches):
        """The fused CPU layer kernel's step metadata, or (None, None) when it does not apply."""
        if (not self.cpu_fused_layers or self.backend != "auto" or input_ids.is_cuda or not meta.seq_lens
                or not self.layers[0].sdpa_decode or not fused_kernel_available()):
            return None, None
        return step_struct(meta, self.cos, self.sin, kv_caches[0][0].shape[1])

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, H] -> [N, V] fp32
        return self.lm_head(hidden).float()

    @torch.inference_mode()
    def load_hf_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Hugging Face Llama names -> this module (fusing q/k/v and gate/up)."""
        cfg = self.cfg

        def take(name: str) -> torch.Tensor:
            if name not in weights:
                raise KeyError(f"weight {name!r} missing from the checkpoint")
            return weights[name]

        def put(param: torch.Tensor, value: torch.Tensor) -> None:
            if param.shape != value.shape:
                raise ValueError(f"weight shape {tuple(value.shape)} != expected {tuple(param.shape)}")
            param.copy_(value.to(param.dtype))

        put(self.embed_tokens.weight, take("model.embed_tokens.weight"))
        put(self.norm, take("model.norm.weight"))
        if not cfg.tie_word_embeddings:
            put(self.lm_head.weight, take("lm_head.weight"))
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            put(layer.qkv_proj.weight, torch.cat([take(a + f"{n}_proj.weight") for n in "qkv"]))
            if cfg.attention_bias:
                put(layer.qkv_proj.bias, torch.cat([take(a + f"{n}_proj.bias") for n in "qkv"]))
            put(layer.o_proj.weight, take(a + "o_proj.weight"))
            m = p + "mlp."
            put(layer.gate_up_proj.weight, torch.cat([take(m + "gate_proj.weight"), take(m + "up_proj.weight")]))
            put(layer.down_proj.weight, take(m + "down_proj.weight"))
            put(layer.input_norm, take(p + "input_layernorm.weight"))
            put(layer.post_norm, take(p + "post_attention_layernorm.weight"))


def weight_bytes(model: LlamaModel) -> int:
    """Bytes of weights one decode step streams: every layer weight and the LM head (the int8
    and q4 formats keep theirs as buffers); the embedding only where it is the LM head (a
    lookup reads one row); not the rope tables."""
    embed = model.embed_tokens.weight
    tables = {id(model.cos), id(model.sin)}
    seen, total = set(), 0
    for p in [*model.parameters(), *model.buffers()]:
        if id(p) in seen or id(p) in tables or (p is embed and model.lm_head.weight is not embed):
            continue
        seen.add(id(p))
        total += p.numel() * p.element_size()
    return total
