"""GGUF file (llama architecture): dequantize with `gguf`, map to Hugging Face names.

llama.cpp's converter permutes the rows of the Q and K projections for its adjacent-pair
RoPE; they are un-permuted here so the model keeps Hugging Face's rotate-half layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from llm_engine.config import ModelConfig
from parley.errors import ModelCorruptError

GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


def open_gguf(path: Path) -> gguf.GGUFReader:
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError, IndexError) as e:
        raise ModelCorruptError(str(path), f"not a readable GGUF file: {e}",
                                "re-download or re-install the model file") from None


def gguf_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        out[key] = field.contents()
    return out


def gguf_config(meta: dict[str, Any], path: Path) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(f"{path}: GGUF architecture {arch!r} unsupported; supported: {sorted(GGUF_ARCHITECTURES)}")
    a = arch
    heads = meta[f"{a}.attention.head_count"]
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        vocab_size=meta.get(f"{a}.vocab_size") or len(meta["tokenizer.ggml.tokens"]),
        hidden_size=meta[f"{a}.embedding_length"],
        intermediate_size=meta[f"{a}.feed_forward_length"],
        num_layers=meta[f"{a}.block_count"],
        num_heads=heads,
        num_kv_heads=meta.get(f"{a}.attention.head_count_kv", heads),
        head_dim=meta.get(f"{a}.rope.dimension_count") or meta[f"{a}.embedding_length"] // heads,
        rms_norm_eps=float(meta.get(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta.get(f"{a}.rope.freq_base", 10000.0)),
        max_position_embeddings=meta.get(f"{a}.context_length", 2048),
        tie_word_embeddings=False,  # decided from the tensors present
        attention_bias=arch == "qwen2",
        architecture=GGUF_ARCHITECTURES[arch],
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (eos,),
    )


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:  # [out, in] (or [out] for a bias)
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def gguf_weights(reader: gguf.GGUFReader, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        arr = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        name = t.name
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        elif name.startswith("blk."):
            _, idx, kind, suffix = name.split(".", 3)
            if kind not in _LAYER_NAMES:
                continue
            if kind == "attn_q":
                arr = _unpermute(arr, cfg.num_heads)
            elif kind == "attn_k":
                arr = _unpermute(arr, cfg.num_kv_heads)
            hf = f"model.layers.{idx}.{_LAYER_NAMES[kind]}.{suffix}"
        else:
            continue
        weights[hf] = torch.from_numpy(arr.copy())
    return weights
