"""`parley talk`: the voice session in a browser page over one local websocket, with no
LiveKit server. PROTOCOL.md beside this file documents the wire protocol."""

from pipeline.talk.config import TalkConfig
from pipeline.talk.protocol import ProtocolError
from pipeline.talk.server import TalkServer, serve

__all__ = ["ProtocolError", "TalkConfig", "TalkServer", "serve"]
