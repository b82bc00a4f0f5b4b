"""Per-sequence draft length from the running acceptance rate.

With per-token acceptance a, a draft of k tokens yields E = (1 - a^(k+1)) / (1 - a) tokens per
target pass and costs one pass plus k drafter steps of relative cost c. We pick the k in
[0, k_max] maximizing E / (1 + c*k) from an exponentially weighted estimate of a, so a
sequence whose drafts keep failing falls back to plain decoding (k = 0) and probes again later.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AdaptiveDraftLength:
    k_max: int = 5
    draft_cost: float = 0.02  # drafter step time / target pass time (n-gram ~0, head ~0.05)
    decay: float = 0.8  # weight of the past in the running acceptance estimate
    prior: float = 0.6
    probe_every: int = 8  # after this many k=0 steps, try k=1 again
    rate: float = field(init=False)
    _idle: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.k_max < 0 or not 0 <= self.decay < 1 or self.draft_cost < 0:
            raise ValueError("need k_max >= 0, 0 <= decay < 1, draft_cost >= 0")
        self.rate = self.prior

    def next_k(self) -> int:
        a = min(self.rate, 0.999)
        best_k, best = 0, 1.0
        for k in range(1, self.k_max + 1):
            gain = (1 - a ** (k + 1)) / (1 - a) / (1 + self.draft_cost * k)
            if gain > best + 1e-9:
                best_k, best = k, gain
        if best_k == 0:
            self._idle += 1
            if self._idle >= self.probe_every:
                self._idle = 0
                return 1
        return best_k

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        # accepted-prefix length -> per-token rate: a^... approximated by accepted/drafted
        self.rate = self.decay * self.rate + (1 - self.decay) * (accepted / drafted)
