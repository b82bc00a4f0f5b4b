"""Model loaders: a Hugging Face directory (safetensors only) or a GGUF file."""

from llm_engine.loader.load import load_model

__all__ = ["load_model"]
