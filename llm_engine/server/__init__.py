"""`parley serve`: the engine behind an OpenAI-compatible HTTP API (chat and text completions,
streaming over SSE, Prometheus metrics), one engine loop batching every client's requests."""

from llm_engine.server.app import build_app
from llm_engine.server.config import ServerConfig, is_loopback
from llm_engine.server.protocol import APIError
from llm_engine.server.server import ServerThread, serve

__all__ = ["APIError", "ServerConfig", "ServerThread", "build_app", "is_loopback", "serve"]
