"""ServerConfig: how `parley serve` listens, authenticates and sheds load (frozen, validated)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1); anything else, including
    0.0.0.0 and names that resolve elsewhere, is reachable from outside."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (tests, benchmarks)
    api_key: str | None = None  # checked on /v1/* when set; required off loopback
    model_name: str = "smollm2-135m-instruct"  # the one id /v1/models lists and requests must name
    # Backpressure: requests admitted at once (running in the engine + waiting for a slot).
    # Beyond it a request is answered 429 with Retry-After at once, so neither the engine's
    # queue nor the server's memory grows with the offered load.
    max_queue: int = 128
    retry_after_s: int = 1
    max_body_bytes: int = 1 << 20  # a larger request body is a 413
    shutdown_timeout_s: float = 30.0  # in-flight requests get this long to finish on SIGTERM

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError("host must be a non-empty string")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise ValueError("api_key must be a non-empty string or None")
        if self.api_key is None and not is_loopback(self.host):
            raise ValueError(f"binding to {self.host} (off loopback) requires an API key (--api-key)")
        if not self.model_name:
            raise ValueError("model_name must be non-empty")
        if not isinstance(self.max_queue, int) or self.max_queue < 1:
            raise ValueError(f"max_queue must be an integer >= 1, got {self.max_queue!r}")
        if not isinstance(self.retry_after_s, int) or self.retry_after_s < 1:
            raise ValueError(f"retry_after_s must be an integer >= 1, got {self.retry_after_s!r}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if self.shutdown_timeout_s < 0:
            raise ValueError(f"shutdown_timeout_s must be >= 0, got {self.shutdown_timeout_s}")
