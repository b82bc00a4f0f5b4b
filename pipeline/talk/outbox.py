"""`Outbox`: what one connection still has to send, in order, with agent audio droppable.

The session's sinks are plain callbacks that must not block, so they only append here; one
sender task per connection drains it to the socket. An interrupt drops the agent audio still
queued (the page stops what it already has), and a client that stops reading is cut off once
`max_audio` frames wait instead of letting the queue grow without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque

SLOW = object()  # returned by get() once the audio backlog overflowed


class Outbox:
    def __init__(self, max_audio: int) -> None:
        self._items: deque[bytes | str] = deque()
        self._audio = 0
        self._max_audio = max_audio
        self._wake = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.dropped_frames = 0  # agent frames dropped by interrupts

    def put_audio(self, frame: bytes) -> None:
        if self.closed or self.overflowed:
            return
        if self._audio >= self._max_audio:
            self.overflowed = True
        else:
            self._items.append(frame)
            self._audio += 1
        self._wake.set()

    def put_text(self, text: str, *, interrupt: bool = False) -> None:
        if self.closed or self.overflowed:
            return
        if interrupt and self._audio:
            kept = [item for item in self._items if isinstance(item, str)]
            self.dropped_frames += self._audio
            self._items = deque(kept)
            self._audio = 0
        self._items.append(text)
        self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._items.clear()
        self._audio = 0
        self._wake.set()

    def __len__(self) -> int:
        return len(self._items)

    async def get(self) -> bytes | str | object | None:
        """The next item; SLOW once the backlog overflowed; None once closed."""
        while True:
            if self.overflowed:
                return SLOW
            if self.closed:
                return None
            if self._items:
                item = self._items.popleft()
                if isinstance(item, bytes):
                    self._audio -= 1
                return item
            self._wake.clear()
            await self._wake.wait()
