"""CoreGate: one stage borrows every core for a moment while another stage waits.

On 2 cores each stage of a voice session runs on one thread, so stages overlap without
fighting. One moment is worth more than the rest: the synthesis of the reply's first chunk,
which the user waits for while the LLM is already far ahead of the speech. There Piper at 2
threads on an idle machine took 73 ms where 1 thread took 122 ms; at 2 threads beside a busy
core it took 167 ms (2-word chunks, 2-core Zen 1), so the two threads only pay off if the
other stage steps aside. The synthesizer holds the gate while it runs; the LLM engine's
thread waits for it before each step, for at most `max_wait_s` (a step never starves).

The moment before it could be another: the LLM's steps that compute a reply's first
LEAD_TOKENS tokens, right after the user's words are known. Then the engine holds the gate at
2 kernel threads when the STT is idle (`hold_if_idle`), and the STT, whose only work then is
the word alignment of the decode that gave those words, waits for it before each part of a
decode (`work`; LLMEngine.lead_gate, WhisperDecoder.core_gate). A session does so only with
SessionConfig.llm_lead_threads > 1 (off: with a hold per step the reply's first token came ~30
ms sooner, its first audio did not). A thread never waits for its own holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A reply's first tokens, which the user waits for: the voice benchmark's first clause ("the
# first punctuation or 8 tokens").
LEAD_TOKENS = 8


class CoreGate:
    def __init__(self, max_wait_s: float = 0.5) -> None:
        if not max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0, got {max_wait_s}")
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._holders = 0
        self._mine: dict[int, int] = {}  # thread id -> its holds: a thread never waits for its own
        self._working = 0  # `work` blocks running
        self._begun = 0  # holds taken by `hold_if_idle` so far

    @property
    def held(self) -> bool:
        return self._holders > 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        """The caller wants the cores: `wait` blocks the other stages until every hold ends."""
        with self._cond:
            self._take()
        try:
            yield
        finally:
            self._give()

    def wait(self) -> float:
        """Block while another thread holds the gate, at most max_wait_s; -> the seconds waited."""
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(self._free, timeout=self.max_wait_s)
        return time.perf_counter() - t0

    @contextmanager
    def work(self, expect_hold_s: float = 0.0) -> Iterator[None]:
        """A part of the waiting stage's work: `wait`, then count as running until the block
        ends, so that `hold_if_idle` leaves the cores to it. `expect_hold_s`: first give a hold
        that is on its way (one that the work's own last step asked for) that long to begin."""
        with self._cond:
            if expect_hold_s > 0:
                begun = self._begun
                self._cond.wait_for(lambda: self._begun != begun or not self._free(), timeout=expect_hold_s)
            self._cond.wait_for(self._free, timeout=self.max_wait_s)
            self._working += 1
        try:
            yield
        finally:
            with self._cond:
                self._working -= 1

    @contextmanager
    def hold_if_idle(self) -> Iterator[bool]:
        """`hold`, unless a `work` block runs now; -> whether it holds. Two threads beside a
        busy core are slower than one: a reply's 6th token 184 ms at 1 thread, 294 at 2 beside
        a Whisper encoder (2-core Zen 1), so the borrower only borrows idle cores."""
        with self._cond:
            held = self._working == 0
            if held:
                self._take()
                self._begun += 1
                self._cond.notify_all()
        try:
            yield held
        finally:
            if held:
                self._give()

    def _free(self) -> bool:  # under the lock
        return self._holders == self._mine.get(threading.get_ident(), 0)

    def _take(self) -> None:  # under the lock
        me = threading.get_ident()
        self._holders += 1
        self._mine[me] = self._mine.get(me, 0) + 1

    def _give(self) -> None:
        me = threading.get_ident()
        with self._cond:
            self._holders -= 1
            self._mine[me] -= 1
            if not self._mine[me]:
                del self._mine[me]
            self._cond.notify_all()
