"""`ParleyAgentSession`: livekit's AgentSession with memory bounded over a long session.

livekit keeps two records that grow with every turn and never shrink while the session runs:
- `AgentSession.emit` appends every event it emits (VAD metrics, usage updates with deep
  copies of every model's usage, transcripts, state changes) to a list, for the session report
  a LiveKit Cloud job uploads when it ends. Measured in a real 30-turn session
  (tracemalloc): the Python heap grew ~120 KB a turn, ~80 KB of it this list.
  Without a recording (`record` off: every serverless session, and a room job whose server
  records nothing) the list is read by nobody, so it is not kept.
- `AgentSession.history`, the whole conversation: `trim_history` keeps it to the agent's own
  (trimmed) chat context, see pipeline/session.py.
"""

from __future__ import annotations

from typing import Any

from livekit.agents import AgentSession
from livekit.agents.types import recording_enabled


class ParleyAgentSession(AgentSession):
    def emit(self, event: Any, arg: Any) -> None:
        super().emit(event, arg)
        if not self.recording:
            self._recorded_events.clear()

    @property
    def recording(self) -> bool:
        """Whether anything records this session (livekit's `record` option, set at start)."""
        return recording_enabled(self.options.recording_options)

    def trim_history(self, max_items: int) -> None:
        """Keep the newest `max_items` items of `history` (its instructions stay first), unless
        the session is recorded: a recording's report gets the whole conversation."""
        if not self.recording:
            self.history.truncate(max_items=max_items)
