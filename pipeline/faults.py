"""Fault injection for the voice session's stages, selectable from tests and the soak benchmark.

Each wrapper has the methods of the stage it wraps and misbehaves on the calls its `Fault`
names (0-based call numbers; every other call goes to the real stage untouched):

- `FaultyLLM` wraps an engine (LLMEngine or FakeLLM): `stream_chat` returns a stream that
  raises, stalls, ends without text, or yields a non-text delta.
- `FaultySynthesizer` wraps a tts Synthesizer: `_synthesize_impl` raises, stalls, returns no
  samples, returns samples that are not numbers, or returns NaN audio.
- `FaultyTranscriber` wraps a streaming transcriber: `push` raises, `poll` returns events
  that are not transcript events, or a turn's final never comes (a stalled decoder).

The session must turn each into a typed, logged error, a spoken apology and a recovered
session (tests/test_reliability_faults.py), never a hang.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from parley.errors import ParleyError
from tts.synthesizer import Synthesizer

FAULT_KINDS = ("raise", "stall", "empty", "malformed", "nan")


class InjectedFault(ParleyError):
    """The error a `raise` fault raises. Retryable: the next call goes through."""

    retryable = True


@dataclass(frozen=True)
class Fault:
    kind: str
    calls: tuple[int, ...] = (0,)  # which calls misbehave (0-based)
    stall_s: float = 30.0  # a stall: how long the call blocks (past any sane deadline)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, got {self.kind!r}")
        if not self.calls or any(c < 0 for c in self.calls):
            raise ValueError("calls must name at least one call number >= 0")
        if self.stall_s <= 0:
            raise ValueError("stall_s must be positive")

    def hits(self, call: int) -> bool:
        return call in self.calls


class _Counter:
    """Call numbering shared by the threads a stage runs on."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            n, self._n = self._n, self._n + 1
            return n


# -- LLM ----------------------------------------------------------------------------------


class _FaultStream:
    """What `stream_chat` returns on a faulty call: an async iterator with `aclose`."""

    output = None

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.closed = False

    def __aiter__(self) -> _FaultStream:
        return self

    async def __anext__(self) -> Any:
        kind = self.fault.kind
        if kind == "raise":
            raise InjectedFault("llm: injected failure")
        if kind == "stall":
            await asyncio.sleep(self.fault.stall_s)
        if kind == "malformed":
            return b"\xff\x00 not text"
        raise StopAsyncIteration  # "empty" (and "nan", meaningless for text): no deltas

    async def aclose(self) -> None:
        self.closed = True


class FaultyLLM:
    """An engine whose `stream_chat` misbehaves on the fault's calls; all else is the engine's."""

    def __init__(self, engine: Any, fault: Fault) -> None:
        self.engine, self.fault = engine, fault
        self._calls = _Counter()
        self.faulted: list[_FaultStream] = []

    def stream_chat(self, messages: list[dict[str, Any]], params: Any = None, request_id: str | None = None):
        if self.fault.hits(self._calls.next()):
            stream = _FaultStream(self.fault)
            self.faulted.append(stream)
            return stream
        return self.engine.stream_chat(messages, params, request_id)

    def __getattr__(self, name: str) -> Any:  # encode_chat, token_limit, prefill, abort...
        return getattr(self.engine, name)


# -- TTS ----------------------------------------------------------------------------------


class FaultySynthesizer(Synthesizer):
    """A Synthesizer whose backend call misbehaves on the fault's calls. The base class's
    `synthesize` sees the bad output exactly as it would a real backend's."""

    def __init__(self, inner: Synthesizer, fault: Fault) -> None:
        super().__init__(inner.sample_rate)
        self.inner, self.fault = inner, fault
        self.name = f"faulty-{inner.name}"
        self._calls = _Counter()
        self._release = threading.Event()  # set by close(): a stalled call returns at once

    def _synthesize_impl(self, text: str) -> np.ndarray:  # [N] float32 at sample_rate
        if not self.fault.hits(self._calls.next()):
            return self.inner._synthesize_impl(text)
        kind = self.fault.kind
        if kind == "raise":
            raise InjectedFault("tts: injected failure")
        if kind == "stall":
            self._release.wait(self.fault.stall_s)
            return self.inner._synthesize_impl(text)
        if kind == "empty":
            return np.zeros(0, dtype=np.float32)
        if kind == "malformed":
            return np.array(["not", "audio"], dtype=object)
        audio = np.asarray(self.inner._synthesize_impl(text), dtype=np.float32).copy()
        audio[:: max(1, len(audio) // 8)] = np.nan
        return audio

    def close(self) -> None:
        self._release.set()
        self.inner.close()


# -- STT ----------------------------------------------------------------------------------


class FaultyTranscriber:
    """A streaming transcriber that misbehaves on the fault's calls: `raise` makes those `push`
    calls raise, `malformed` makes the `poll` after them return events that are not transcript
    events, `empty` drops their events; `stall` counts `flush_future` calls instead: the
    final of those turns never comes (a hung decoder; `push` only queues, so it cannot stall)
    until `reset()` cancels it, `stall_s` passes or the transcriber closes."""

    def __init__(self, inner: Any, fault: Fault) -> None:
        self.inner, self.fault = inner, fault
        self._calls = _Counter()
        self._flushes = _Counter()
        self._bad_poll = False
        self._release = threading.Event()
        self._stalled: list[Future] = []

    def push(self, *args: Any, **kwargs: Any) -> Any:
        kind = self.fault.kind
        if kind != "stall" and self.fault.hits(self._calls.next()):
            if kind == "raise":
                raise InjectedFault("stt: injected failure")
            self._bad_poll = kind == "malformed"
            if kind in ("empty", "nan"):
                self.inner.push(*args, **kwargs)
                return []
        return self.inner.push(*args, **kwargs)

    def poll(self) -> Any:
        if self._bad_poll:
            self._bad_poll = False
            return [object()]
        return self.inner.poll()

    def flush_future(self) -> Future:
        if self.fault.kind != "stall" or not self.fault.hits(self._flushes.next()):
            return self.inner.flush_future()
        self.inner.reset()  # the turn's audio is lost with the hung decode
        stalled: Future = Future()
        self._stalled.append(stalled)

        def give_up() -> None:  # a stall past stall_s ends in an error, like a dead decoder
            if not self._release.wait(self.fault.stall_s) and stalled.set_running_or_notify_cancel():
                stalled.set_exception(InjectedFault("stt: injected stall ended"))

        threading.Thread(target=give_up, daemon=True).start()
        return stalled

    def reset(self) -> None:
        for f in self._stalled:
            f.cancel()
        self._stalled.clear()
        self.inner.reset()

    def close(self) -> None:
        self._release.set()
        self.reset()
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
