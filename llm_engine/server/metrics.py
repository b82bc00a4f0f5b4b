"""Prometheus metrics of one server, in its own registry (no process-wide collector state):
request and token counters, latency histograms, and gauges read from the engine at scrape
time (KV-cache use, prefix-cache hit rate, speculative acceptance)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# A voice turn's first-token allotment is 60 ms; buckets resolve 5 ms .. 10 s around it.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
# Decode here is 20-40 tok/s at batch 1 (25-50 ms a token), slower per stream in big batches.
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def free_blocks(engine: Any) -> int:
    """Free KV blocks (a free block still holding a cached prefix counts as free)."""
    n = getattr(engine, "num_free_blocks", None)
    return int(n) if n is not None else int(engine.bm.num_free_blocks)


def total_blocks(engine: Any) -> int:
    n = getattr(engine, "num_blocks", None)
    return int(n) if n is not None else len(engine.bm.blocks)


class _EngineCollector(Collector):
    """Reads the engine's state when Prometheus scrapes (cheap attribute reads, no lock)."""

    def __init__(self, engine: Any, metrics: ServerMetrics) -> None:
        self.engine, self.metrics = engine, metrics

    def collect(self) -> Iterator[Any]:
        free, total = free_blocks(self.engine), total_blocks(self.engine)
        yield GaugeMetricFamily("parley_kv_cache_free_blocks", "Free KV-cache blocks", value=free)
        yield GaugeMetricFamily("parley_kv_cache_blocks", "KV-cache blocks in all", value=total)
        yield GaugeMetricFamily("parley_kv_cache_usage_ratio", "Fraction of KV-cache blocks in use",
                                value=1.0 - free / total if total else 0.0)
        m = self.metrics
        yield GaugeMetricFamily("parley_prefix_cache_hit_rate",
                                "Prompt tokens served from the prefix cache / prompt tokens, since start",
                                value=m.cached_tokens / m.prompt_tokens if m.prompt_tokens else 0.0)
        spec = getattr(self.engine, "spec_metrics", None)
        drafted = getattr(spec, "drafted", 0) if spec is not None else 0
        accepted = getattr(spec, "accepted", 0) if spec is not None else 0
        yield CounterMetricFamily("parley_spec_draft_tokens", "Speculative tokens drafted", value=drafted)
        yield CounterMetricFamily("parley_spec_accepted_tokens", "Speculative tokens accepted", value=accepted)
        yield GaugeMetricFamily("parley_spec_acceptance_rate", "Accepted / drafted speculative tokens",
                                value=accepted / drafted if drafted else 0.0)


class ServerMetrics:
    def __init__(self, engine: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("parley_http_requests", "HTTP requests answered", ["endpoint", "status"],
                                registry=r)
        self.finished = Counter("parley_requests_finished", "Generations finished", ["finish_reason"], registry=r)
        self.rejected = Counter("parley_requests_rejected", "Requests refused by backpressure", ["reason"],
                                registry=r)
        self.prompt_counter = Counter("parley_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_counter = Counter("parley_generation_tokens", "Tokens generated", registry=r)
        self.cached_counter = Counter("parley_prefix_cache_hit_tokens", "Prompt tokens from the prefix cache",
                                      registry=r)
        self.in_flight = Gauge("parley_requests_in_flight", "Requests admitted (running + waiting)", registry=r)
        self.ttft = Histogram("parley_time_to_first_token_seconds", "Arrival to first text delta",
                              buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("parley_inter_token_latency_seconds", "Gap between a stream's text deltas",
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("parley_request_latency_seconds", "Arrival to the last token",
                             buckets=E2E_BUCKETS, registry=r)
        self.prompt_tokens = 0  # the plain sums behind the hit-rate gauge
        self.cached_tokens = 0
        r.register(_EngineCollector(engine, self))

    def record_finish(self, finish_reason: str, prompt_tokens: int, completion_tokens: int,
                      cached_tokens: int) -> None:
        self.finished.labels(finish_reason).inc()
        self.prompt_counter.inc(prompt_tokens)
        self.generation_counter.inc(completion_tokens)
        self.cached_counter.inc(cached_tokens)
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
