"""Model and engine configuration (frozen, validated)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
# CPU weight formats of the layers' linears (llm_engine.quant): q4 is GGUF's Q4_1 (blocks of 32)
WEIGHT_FORMATS = ("fp32", "bf16", "int8", "q4")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2: q/k/v bias
    architecture: str = "LlamaForCausalLM"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {self.architecture!r}; supported: {SUPPORTED_ARCHITECTURES}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even, got {self.head_dim}")

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        archs = cfg.get("architectures") or ["LlamaForCausalLM"]
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=_rope_theta(cfg),
            rope_scaling=_rope_scaling(cfg),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", archs[0] == "Qwen2ForCausalLM"),
            architecture=archs[0],
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )


def _rope_theta(cfg: dict[str, Any]) -> float:
    params = cfg.get("rope_parameters") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _rope_scaling(cfg: dict[str, Any]) -> dict[str, Any] | None:
    # transformers 5 stores scaling in "rope_parameters"; older configs in "rope_scaling".
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or None
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise ValueError(f"unsupported rope scaling {kind!r}; supported: llama3")
    return dict(scaling)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model. Defaults fit a shared 2-core CPU."""

    dtype: torch.dtype | None = None  # None: fp32 on CPU, bf16 on CUDA
    device: str | None = None  # None: cuda if available else cpu
    backend: str = "auto"  # kernels backend: "auto" | "triton" | "torch"
    block_size: int = 16
    num_blocks: int | None = None  # None: sized from max_cache_tokens
    max_cache_tokens: int = 16384
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512  # per-step token budget (chunked prefill)
    # prefill-ahead hints (engine.prefill) run only in steps nobody else needs, this many
    # tokens a step: what a request that arrives meanwhile waits at most (one block: ~160 ms
    # on a 2-core Zen 1, whose prefill runs ~5 ms a token on one thread)
    hint_chunk_tokens: int = 16
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    enable_prefix_caching: bool = True
    num_threads: int | None = 1  # torch intra-op threads; None leaves torch's setting alone
    enforce_eager: bool = False  # CUDA: skip CUDA-graph capture of decode
    cuda_graph_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    cpu_sdpa_decode: bool = True  # CPU decode/verify: llm_engine.cpu_attention + the fused layer; False: kernels
    weight_format: str = "fp32"  # CPU: one of WEIGHT_FORMATS (int8 activations with int8 / q4; llm_engine.quant)
    linear_backend: str = "auto"  # CPU matmuls: "auto" | "onednn" | "torch" (see llm_engine.linear)

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "triton", "torch"):
            raise ValueError(f"backend must be auto|triton|torch, got {self.backend!r}")
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0 or self.hint_chunk_tokens <= 0:
            raise ValueError("max_num_seqs, max_num_batched_tokens and hint_chunk_tokens must be positive")
        if self.num_blocks is not None and self.num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {self.num_blocks}")
        if self.weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"weight_format must be {'|'.join(WEIGHT_FORMATS)}, got {self.weight_format!r}")
        if self.linear_backend not in ("auto", "onednn", "torch"):
            raise ValueError(f"linear_backend must be auto|onednn|torch, got {self.linear_backend!r}")

    def resolved_device(self) -> torch.device:
        if self.device is not None:
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def resolved_dtype(self) -> torch.dtype:
        if self.dtype is not None:
            return self.dtype
        return torch.bfloat16 if self.resolved_device().type == "cuda" else torch.float32

    def resolved_num_blocks(self) -> int:
        return self.num_blocks or max(1, self.max_cache_tokens // self.block_size)
