"""`TalkConfig`: where the talk server listens and the limits it enforces."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
# The rates the page can be told to play: what tts.StreamConfig can produce.
OUTPUT_RATES = (16_000, 22_050, 24_000, 44_100, 48_000)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost: not known to stay on this machine
        return False


@dataclass(frozen=True)
class TalkConfig:
    """The talk server's settings. Any host but a loopback one needs a token: the socket
    carries a live microphone and drives the models, so it is never open to the network."""

    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (tests); the server reports the one it got
    token: str | None = None  # required on non-loopback hosts; checked on every connect when set
    max_sessions: int = 4
    # 20 ms of 16 kHz PCM16 is 640 bytes: 10x that leaves room for a page that batches a few
    # frames under load while a runaway or hostile client is cut off at once.
    max_frame_bytes: int = 6_400
    max_text_bytes: int = 4_096
    output_rate: int = 24_000  # agent audio rate announced in "hello" (frames are resampled to it)
    hello_timeout_s: float = 10.0  # a connection that sends no "hello" by then is closed
    # Agent audio queued for a client that does not read (a frozen tab): past this it is closed
    # instead of growing the queue without bound.
    max_backlog_s: float = 10.0
    # Microphone audio may run this far ahead of the wall clock since the connection opened
    # (a burst after a stall, a test pushing a clip at once); past that the connection is
    # closed instead of feeding the session faster than it can listen. Counted from the
    # connection, not from when frames are read: while the first session loads its models
    # (~15 s here) a real-time page's frames queue up and are then read in one burst.
    max_audio_ahead_s: float = 10.0
    allowed_origins: tuple[str, ...] = ()  # extra page origins besides the server's own
    heartbeat_s: float = 10.0  # websocket ping interval: finds clients gone without a close

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("host must not be empty")
        if not 0 <= self.port <= 65_535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.token is not None and len(self.token) < 8:
            raise ValueError("token must be at least 8 characters")
        if self.token is None and not is_loopback(self.host):
            raise ValueError(f"host {self.host} is reachable from other machines: pass --token "
                             "(a secret of 8+ characters the page must present) or bind 127.0.0.1")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.max_frame_bytes < 640 or self.max_frame_bytes % 2:
            raise ValueError("max_frame_bytes must be even and >= 640 (one 20 ms frame)")
        if self.max_text_bytes < 256:
            raise ValueError("max_text_bytes must be >= 256")
        if self.output_rate not in OUTPUT_RATES:
            raise ValueError(f"output_rate must be one of {OUTPUT_RATES}, got {self.output_rate}")
        if min(self.hello_timeout_s, self.max_backlog_s, self.heartbeat_s, self.max_audio_ahead_s) <= 0:
            raise ValueError("hello_timeout_s, max_backlog_s, heartbeat_s and max_audio_ahead_s must be > 0")
        for origin in self.allowed_origins:
            if not origin.startswith(("http://", "https://")) or origin.endswith("/"):
                raise ValueError(f"allowed origin {origin!r} must look like http(s)://host[:port]")

    @property
    def backlog_frames(self) -> int:
        return max(50, round(self.max_backlog_s * 50))  # 20 ms frames
