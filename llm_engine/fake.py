"""A timed fake of LLMEngine for pipeline tests: scripted replies, configurable time to first
token and per-token delay, the same public methods (generate, chat, encode_chat, stream_chat,
abort) and the same error rules, no model. A "token" is a word with its leading space."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from llm_engine.outputs import RequestOutput
from llm_engine.sampling_params import SamplingParams

Reply = str | Callable[[list[dict[str, Any]]], str]


class FakeLLM:
    """Reply k is script[k % len(script)] (a string, or a function of the messages)."""

    def __init__(self, script: list[Reply] | tuple[Reply, ...] = ("Sure, I can help with that.",), *,
                 ttft_s: float = 0.05, token_s: float = 0.01) -> None:
        if not script or ttft_s < 0 or token_s < 0:
            raise ValueError("need a non-empty script and delays >= 0")
        self.script, self.ttft_s, self.token_s = list(script), ttft_s, token_s
        self._turn = itertools.count()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._live: dict[str, threading.Event] = {}  # request id -> aborted flag
        self.requests: list[list[dict[str, Any]]] = []  # every conversation asked, in order

    # ---- the engine's API ---------------------------------------------------------
    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if not messages:
            raise ValueError("empty conversation")
        text = " ".join(str(m.get("content", "")) for m in messages)
        return [hash(w) % 50000 for w in text.split()] or [0]

    def generate(self, prompts, params: SamplingParams | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings or of token-id lists")
        return [self._finish(self._new_id(None), [{"role": "user", "content": str(p)}], params) for p in prompts]

    def chat(self, conversations: list[list[dict[str, Any]]], params: SamplingParams | None = None
             ) -> list[RequestOutput]:
        if not isinstance(conversations, list) or not conversations or not isinstance(conversations[0], list):
            raise ValueError("chat takes a list of conversations (each a list of messages)")
        return [self._finish(self._new_id(None), c, params) for c in conversations]

    async def stream_chat(self, messages: list[dict[str, Any]], params: SamplingParams | None = None,
                          request_id: str | None = None) -> AsyncIterator[str]:
        self.encode_chat(messages)  # same validation as the engine
        rid = self._new_id(request_id)
        aborted = self._register(rid)
        done = False
        try:
            tokens, _ = self._reply(messages, params)
            for i, tok in enumerate(tokens):
                await asyncio.sleep(self.ttft_s if i == 0 else self.token_s)
                if aborted.is_set():
                    break
                yield tok
            done = True
        finally:
            with self._lock:
                self._live.pop(rid, None)
            if not done:
                aborted.set()  # the consumer stopped listening (barge-in)

    def abort(self, request_id: str) -> bool:
        with self._lock:
            ev = self._live.get(request_id)
        if ev is None:
            return False
        ev.set()
        return True

    # ---- internals ----------------------------------------------------------------
    def _new_id(self, request_id: str | None) -> str:
        rid = request_id or f"fake-{next(self._ids)}"
        with self._lock:
            if rid in self._live:
                raise ValueError(f"request id {rid!r} is already running")
        return rid

    def _register(self, rid: str) -> threading.Event:
        ev = threading.Event()
        with self._lock:
            self._live[rid] = ev
        return ev

    def _reply(self, messages: list[dict[str, Any]], params: SamplingParams | None) -> tuple[list[str], str]:
        params = params or SamplingParams()
        self.requests.append(list(messages))
        reply = self.script[next(self._turn) % len(self.script)]
        text = reply(messages) if callable(reply) else reply
        tokens = re.findall(r"\s*\S+", text)
        reason = "stop"
        for s in params.stop:
            cut = "".join(tokens).find(s)
            if cut >= 0:
                tokens = re.findall(r"\s*\S+", "".join(tokens)[: cut + (len(s) if params.include_stop_str_in_output else 0)])
        if len(tokens) > params.max_tokens:
            tokens, reason = tokens[: params.max_tokens], "length"
        return tokens, reason

    def _finish(self, rid: str, messages: list[dict[str, Any]], params: SamplingParams | None) -> RequestOutput:
        self.encode_chat(messages)
        tokens, reason = self._reply(messages, params)
        t0 = time.perf_counter()
        time.sleep(self.ttft_s + self.token_s * max(0, len(tokens) - 1))
        total = time.perf_counter() - t0
        return RequestOutput(rid, self.encode_chat(messages), list(range(len(tokens))), "".join(tokens).strip(),
                             reason, metrics={"ttft_s": self.ttft_s, "total_s": total})
