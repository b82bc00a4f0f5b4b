"""CoreGate: one stage borrows every core for a moment while another stage waits.

On 2 cores each stage of a voice session runs on one thread, so stages overlap without
fighting. One moment is worth more than the rest: the synthesis of the reply's first chunk,
which the user waits for while the LLM is already far ahead of the speech. There Piper at 2
threads on an idle machine took 73 ms where 1 thread took 122 ms; at 2 threads beside a busy
core it took 167 ms (2-word chunks, 2-core Zen 1), so the two threads only pay off if the
other stage steps aside. The synthesizer holds the gate while it runs; the LLM engine's
thread waits for it before each step, for at most `max_wait_s` (a step never starves).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class CoreGate:
    def __init__(self, max_wait_s: float = 0.5) -> None:
        if not max_wait_s > 0:
            raise ValueError(f"max_wait_s must be > 0, got {max_wait_s}")
        self.max_wait_s = max_wait_s
        self._cond = threading.Condition()
        self._holders = 0

    @property
    def held(self) -> bool:
        return self._holders > 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        """The caller wants the cores: `wait` blocks the other stage until every hold ends."""
        with self._cond:
            self._holders += 1
        try:
            yield
        finally:
            with self._cond:
                self._holders -= 1
                if self._holders == 0:
                    self._cond.notify_all()

    def wait(self) -> float:
        """Block while the gate is held, at most max_wait_s; -> the seconds waited."""
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: self._holders == 0, timeout=self.max_wait_s)
        return time.perf_counter() - t0
