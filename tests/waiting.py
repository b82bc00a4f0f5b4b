"""Poll a condition another thread makes true, failing the test (not hanging it) if it never does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "the condition",
               poll_s: float = 0.002) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)
