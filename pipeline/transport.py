"""The boundary between the voice session and its transports (LiveKit room, the local
websocket page, WAV files in the benchmark): one pipeline, several transports.

A transport pushes the user's audio into a `SessionHandle` and receives the agent's audio and
events through two callbacks it hands to a `SessionFactory`. Everything crossing this boundary
is plain data (numpy arrays, JSON-able dicts), so a transport knows nothing of livekit-agents.

Agent audio: `AudioSink(pcm, sample_rate)` gets mono int16 frames of 20 ms, paced in real
time by the session (a frame is handed over when it is due to play, give or take the output's
small jitter lead), so a transport can write each frame to its speaker / socket / timeline as
it comes. An `{"type": "interrupt"}` event means: drop whatever agent audio is still buffered.

Events (`EventSink(event)`), each a dict with a "type":
- {"type": "state", "agent": "listening" | "thinking" | "speaking"}
- {"type": "vad", "speaking": bool, "t": float}                       user speech start / end
- {"type": "transcript", "final": bool, "text": str, "turn": int}      user words (interim/final)
- {"type": "reply", "text": str, "final": bool, "turn": int}           the agent's text so far
- {"type": "interrupt", "turn": int}                                  user spoke over the agent
- {"type": "budget", "turn": int, "perceived_ms": float | None, "budget_ms": float,
   "stages": [{"name": str, "ms": float | None, "allotment_ms": float, "overrun": bool}, ...],
   "overruns": [str, ...], "marks": {mark name: seconds on the session's monotonic clock}}
- {"type": "error", "message": str, "retryable": bool}
Callbacks are called on the session's event loop and must not block.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

AudioSink = Callable[[np.ndarray, int], None]  # (int16 [N] mono, sample rate)
EventSink = Callable[[dict[str, Any]], None]


class SessionHandle(Protocol):
    """One running voice session, fed by a transport."""

    def push_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        """User audio: int16 or float32 mono [N] at any supported rate. Bad frames raise
        AudioFormatError (the session goes on)."""

    async def aclose(self) -> None:
        """End the session: abort any reply in flight, free every engine request and thread."""


SessionFactory = Callable[[AudioSink, EventSink], Awaitable[SessionHandle]]
