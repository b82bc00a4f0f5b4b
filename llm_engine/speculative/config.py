"""SpeculativeConfig and the per-request / aggregate metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

METHODS = ("ngram", "draft", "head", "auto")


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str = "auto"  # "ngram" | "draft" | "head" | "auto"
    num_tokens: int = 5  # k_max: drafted tokens per verification pass
    draft_model: str | None = None  # path of a model sharing the target's tokenizer ("draft")
    adaptive: bool = True  # per-sequence k from the running acceptance rate
    ngram_max: int = 4
    ngram_min: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"speculative method must be one of {METHODS}, got {self.method!r}")
        if not 1 <= self.num_tokens <= 16:
            raise ValueError(f"num_tokens must be in 1..16, got {self.num_tokens}")
        if self.method == "draft" and not self.draft_model:
            raise ValueError("method='draft' needs draft_model")


@dataclass
class SpecMetrics:
    drafted: int = 0
    accepted: int = 0
    passes: int = 0  # target verification passes
    emitted: int = 0  # tokens produced by those passes (accepted + 1 each)
    draft_s: float = 0.0
    verify_s: float = 0.0
    per_request: dict[str, SpecMetrics] = field(default_factory=dict, repr=False)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target pass, the bonus/correction token included (tau in the papers)."""
        return self.emitted / self.passes if self.passes else 0.0

    def record(self, drafted: int, accepted: int, emitted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.emitted += emitted
        self.passes += 1

    def as_dict(self) -> dict:
        return {"drafted": self.drafted, "accepted": self.accepted, "passes": self.passes,
                "acceptance_rate": round(self.acceptance_rate, 4),
                "mean_accepted_length": round(self.mean_accepted_length, 3)}
