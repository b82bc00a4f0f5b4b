"""A timed fake of LLMEngine for pipeline tests: scripted replies, configurable time to first
token and per-token delay, the same public surface (generate, chat, encode_chat, add_request,
stream_chat -> ChatStream, prefill, abort, ensure_worker, num_blocks / num_free_blocks, token_limit)
and the same error rules, no model. A "token" is a word with its leading space.

Requests play in their own thread and call the sink like the engine thread does. A request
holds ceil(tokens / block_size) "blocks" while it runs; num_cached_tokens is the longest
common token prefix with any of the newest SEEN_KEPT prompts or prefills (the engine's full
blocks and, past them, a freed partial block's tokens), less the last prompt token."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from llm_engine.outputs import RequestOutput
from llm_engine.request import Sink
from llm_engine.sampling_params import SamplingParams
from llm_engine.streaming import ChatStream
from parley.cores import LEAD_TOKENS
from parley.errors import EngineClosedError

SEEN_KEPT = 256
Reply = str | Callable[[list[dict[str, Any]]], str]


class FakeLLM:
    """Reply k is script[k % len(script)] (a string, or a function of the messages)."""

    def __init__(self, script: list[Reply] | tuple[Reply, ...] = ("Sure, I can help with that.",), *,
                 ttft_s: float = 0.05, token_s: float = 0.01, num_blocks: int = 1024, block_size: int = 16,
                 max_model_len: int = 8192) -> None:
        if not script or ttft_s < 0 or token_s < 0:
            raise ValueError("need a non-empty script and delays >= 0")
        if num_blocks <= 0 or block_size <= 0 or max_model_len <= 0:
            raise ValueError("num_blocks, block_size and max_model_len must be positive")
        self.max_model_len = max_model_len
        self.script, self.ttft_s, self.token_s = list(script), ttft_s, token_s
        self.num_blocks, self.block_size = num_blocks, block_size
        self._turn = itertools.count()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._live: dict[str, threading.Event] = {}  # request id -> aborted flag
        self._held: dict[str, int] = {}  # request id -> blocks it holds
        self._closed = False
        # the newest prompts computed (the "prefix cache"; bounded, as the engine's blocks are)
        self._seen: deque[list[int]] = deque(maxlen=SEEN_KEPT)
        # the newest conversations asked and prefilled, in order (bounded: a soak runs for hours)
        self.requests: deque[list[dict[str, Any]]] = deque(maxlen=SEEN_KEPT)
        self.prefills: deque[list[dict[str, Any]]] = deque(maxlen=SEEN_KEPT)
        self.core_gate = None  # as LLMEngine.core_gate: each token waits while another stage holds it
        self.lead_gate, self.lead_threads = None, 1  # as LLMEngine's: held until LEAD_TOKENS are out

    # ---- the engine's API ---------------------------------------------------------
    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if not messages:
            raise ValueError("empty conversation")
        text = " ".join(str(m.get("content", "")) for m in messages)
        return [hash(w) % 50000 for w in text.split()] or [0]

    def _prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """encode_chat, refusing a prompt past the window as the engine does."""
        ids = self.encode_chat(messages)
        if len(ids) >= self.token_limit:
            raise ValueError(f"prompt has {len(ids)} tokens; the limit is {self.token_limit - 1}")
        return ids

    @property
    def token_limit(self) -> int:
        """The longest prompt + reply, in tokens (the engine's context window)."""
        return self.max_model_len

    @property
    def num_free_blocks(self) -> int:
        with self._lock:
            return self.num_blocks - sum(self._held.values())

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

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, sink: Sink | None = None) -> str:
        if not prompt:
            raise ValueError("empty prompt")
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        return self._start([{"role": "user", "content": text}], params, self._new_id(request_id), sink)

    def stream_chat(self, messages: list[dict[str, Any]], params: SamplingParams | None = None,
                    request_id: str | None = None) -> ChatStream:
        self._prompt_ids(messages)  # same validation as the engine: raises here
        rid = self._new_id(request_id)
        return ChatStream(rid, lambda sink: self._start(messages, params, rid, sink), self.abort)

    def prefill(self, messages: list[dict[str, Any]], request_id: str | None = None) -> str:
        """Records the prompt as cached (at once); later prompts extending it report the hit."""
        ids = self._prompt_ids(messages)
        rid = self._new_id(request_id)
        with self._lock:
            self.prefills.append(list(messages))
            self._seen.append(ids)
        return rid

    def warmup(self, messages: list[dict[str, Any]] | None = None) -> float:
        """Nothing to warm: scripted replies have no one-time costs."""
        return 0.0

    def ensure_worker(self) -> None:
        """Nothing to start: each request plays in its own thread."""

    def abort(self, request_id: str) -> bool:
        with self._lock:
            ev = self._live.get(request_id)
        if ev is None or ev.is_set():
            return False
        ev.set()
        return True

    def close(self) -> None:
        """As LLMEngine.close: no new requests; the live ones end with finish_reason "error"."""
        with self._lock:
            self._closed = True
            live = list(self._live.values())
        for ev in live:
            ev.set()

    # ---- internals ----------------------------------------------------------------
    def _new_id(self, request_id: str | None) -> str:
        rid = request_id or f"fake-{next(self._ids)}"
        with self._lock:
            if self._closed:
                raise EngineClosedError("the fake LLM is closed: it takes no new requests")
            if rid in self._live:
                raise ValueError(f"request id {rid!r} is already running")
        return rid

    def _cached(self, ids: list[int]) -> int:
        best = 0
        for seen in self._seen:
            n = next((i for i, (a, b) in enumerate(zip(seen, ids)) if a != b), min(len(seen), len(ids)))
            best = max(best, n)
        return min(best, len(ids) - 1)  # the last prompt token is always computed, as in the engine

    def _start(self, messages: list[dict[str, Any]], params: SamplingParams | None, rid: str,
               sink: Sink | None) -> str:
        ids = self._prompt_ids(messages)
        tokens, reason = self._reply(messages, params)
        ev = threading.Event()
        with self._lock:
            if self._closed:
                raise EngineClosedError("the fake LLM is closed: it takes no new requests")
            if rid in self._live:
                raise ValueError(f"request id {rid!r} is already running")
            self._live[rid] = ev
            cached = self._cached(ids)
            self._seen.append(ids)
            self._held[rid] = -(-len(ids) // self.block_size)
        threading.Thread(target=self._play, args=(rid, ids, cached, tokens, reason, sink, ev),
                         name=f"fake-llm-{rid}", daemon=True).start()
        return rid

    def _play(self, rid: str, ids: list[int], cached: int, tokens: list[str], reason: str,
              sink: Sink | None, aborted: threading.Event) -> None:
        t0 = time.perf_counter()
        ttft, sent = None, 0
        with ExitStack() as lead:
            if self.lead_gate is not None and self.lead_threads > 1:
                lead.enter_context(self.lead_gate.hold_if_idle())
            for i, tok in enumerate(tokens):
                if i == LEAD_TOKENS:
                    lead.close()
                if aborted.wait(self.ttft_s if i == 0 else self.token_s):
                    break
                if self.core_gate is not None:
                    self.core_gate.wait()
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                sent += 1
                with self._lock:
                    self._held[rid] = -(-(len(ids) + sent) // self.block_size)
                if sink is not None:
                    sink(tok, None)
        error = None
        if aborted.is_set():
            reason = "error" if self._closed else "abort"
            error = "the fake LLM was closed" if self._closed else None
        with self._lock:
            self._live.pop(rid, None)
            self._held.pop(rid, None)
        metrics = {"total_s": time.perf_counter() - t0}
        if ttft is not None:
            metrics["ttft_s"] = ttft
        out = RequestOutput(rid, ids, list(range(sent)), "".join(tokens[:sent]).strip(), reason, cached, metrics, error)
        if sink is not None:
            sink("", out)

    def _reply(self, messages: list[dict[str, Any]], params: SamplingParams | None) -> tuple[list[str], str]:
        params = params or SamplingParams()
        with self._lock:
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
        ids = self._prompt_ids(messages)
        tokens, reason = self._reply(messages, params)
        t0 = time.perf_counter()
        time.sleep(self.ttft_s + self.token_s * max(0, len(tokens) - 1))
        total = time.perf_counter() - t0
        with self._lock:
            cached = self._cached(ids)
            self._seen.append(ids)
        return RequestOutput(rid, ids, list(range(len(tokens))), "".join(tokens).strip(),
                             reason, cached, metrics={"ttft_s": self.ttft_s, "total_s": total})
