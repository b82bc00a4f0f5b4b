"""Parley's local LLM engine: a Llama-family decoder over a paged KV cache with prefix
caching, continuous batching, chunked prefill, preemption, sampling and async streaming."""

from llm_engine.config import EngineConfig, ModelConfig
from llm_engine.engine import LLMEngine
from llm_engine.fake import FakeLLM
from llm_engine.outputs import RequestOutput
from llm_engine.sampling_params import SamplingParams

__all__ = ["EngineConfig", "FakeLLM", "LLMEngine", "ModelConfig", "RequestOutput", "SamplingParams"]
