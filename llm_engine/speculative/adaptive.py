"""Per-sequence draft length from the running acceptance rate and the measured step costs.

With per-token acceptance a (the chance a drafted token is kept given the ones before it were),
a draft of k tokens yields E(k) = (1 - a^(k+1)) / (1 - a) tokens per target pass. A step with k
drafts costs cost(k) = (verify(k) + k * draft_per_token) / verify(0): the verify pass of k+1
query tokens and k drafter steps, relative to a plain decode step. Both are measured online
(StepCosts). Measured on this 2-core CPU (1 thread, 300 cached tokens, engine forward with
its LM head), a verify pass of 1 / 2 / 4 / 8 query tokens took, in bf16 weights, 11.5 / 12.2 /
13.3 / 13.9 ms; int8 7.0 / 8.5 / 9.3 / 11.1 ms; fp32 20.0 / 23.5 / 32.1 / 31.9 ms (noisy): the
slope differs by format and machine, hence measured, not assumed. The controller picks
the k in [0, k_max] maximizing E(k) / cost(k), so a sequence whose drafts keep failing, or
whose drafter costs more than it saves, falls back to plain decoding (k = 0) and probes again.

In a batch (the engine step) one sequence's k extra verify rows slow every sequence's step,
so the engine asks each sequence in turn for the k maximizing (others + E(k)) / cost(k), where
others is what the rest of the batch is expected to emit and cost(k) = the step with k more
rows / the step without them (StepCosts.step_relative, timed per total row count: the verify
dict's key is rows - 1, which at batch 1 is the draft length). At batch 1 this is the rule
above; at batch 4+ a row is no longer nearly free and a k that does not pay for the whole
batch is not drafted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


class StepCosts:
    """Exponentially weighted verify-pass time per draft length and drafter time per token."""

    def __init__(self, decay: float = 0.8, verify_slope: float = 0.05, draft_per_token: float = 0.02) -> None:
        self.decay = decay
        self.verify: dict[int, float] = {}  # k -> seconds of a verify pass with k drafts
        self.draft: float | None = None  # seconds per drafted token
        self.prior_slope, self.prior_draft = verify_slope, draft_per_token  # relative, before data

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe_verify(self, k: int, seconds: float) -> None:
        self.verify[k] = self._ema(self.verify.get(k), seconds)

    def observe_draft(self, k: int, seconds: float) -> None:
        if k > 0:
            self.draft = self._ema(self.draft, seconds / k)

    def base(self) -> float | None:
        """verify(0), a plain decode step: measured, else extrapolated from the drafted lengths
        measured (two: the line through them; one: the prior slope)."""
        if 0 in self.verify:
            return self.verify[0]
        if not self.verify:
            return None
        known = sorted(self.verify)
        k1, k2 = known[0], known[-1]
        v1 = self.verify[k1]
        if k1 == k2:
            return v1 / (1.0 + self.prior_slope * k1)
        slope = max((self.verify[k2] - v1) / (k2 - k1), 0.0)
        return max(v1 - slope * k1, 0.5 * v1)

    def _verify_rel(self, k: int) -> float:
        """verify(k) / verify(0): measured, else linear through the nearest measured lengths."""
        base = self.base()
        if base is None:
            return 1.0 + self.prior_slope * k
        if k == 0:
            return 1.0
        if k in self.verify:
            return self.verify[k] / base
        known = sorted(self.verify)
        lo = max((j for j in known if j < k), default=0)
        hi = min((j for j in known if j > k), default=None)
        if hi is None:  # extrapolate with the slope up to the longest measured draft
            slope = (self.verify[lo] / base - 1.0) / lo if lo else self.prior_slope
            return (self.verify[lo] / base if lo else 1.0) + max(slope, 0.0) * (k - lo)
        v_lo = self.verify.get(lo, base)
        t = (k - lo) / (hi - lo)
        return ((1 - t) * v_lo + t * self.verify[hi]) / base

    def _draft_rel(self) -> float:
        base = self.base()
        return self.prior_draft if self.draft is None or base is None else self.draft / base

    def relative(self, k: int) -> float:
        """cost of a step with k drafts / cost of a plain step."""
        return self._verify_rel(k) + self._draft_rel() * k

    def step_relative(self, rows: int, k: int) -> float:
        """cost of a step of rows + k query rows, k drafted tokens included / a step of rows."""
        return (self._verify_rel(rows - 1 + k) + self._draft_rel() * k) / self._verify_rel(rows - 1)


@dataclass
class AdaptiveDraftLength:
    k_max: int = 5
    draft_cost: float = 0.02  # drafter step / target pass, used when no cost function is given
    decay: float = 0.8  # weight of the past in the running acceptance estimate
    prior: float = 0.6
    probe_every: int = 8  # after this many k=0 steps alone (batch 1), try k=1 again
    cost: Callable[[int], float] | None = None  # k -> relative step cost (StepCosts.relative)
    batch_margin: float = 0.1  # next_k(others > 0): the gain a draft must promise in a batch
    rate: float = field(init=False)
    _idle: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.k_max < 0 or not 0 <= self.decay < 1 or self.draft_cost < 0:
            raise ValueError("need k_max >= 0, 0 <= decay < 1, draft_cost >= 0")
        self.rate = self.prior

    def _cost(self, k: int) -> float:
        return self.cost(k) if self.cost is not None else 1.0 + self.draft_cost * k

    def expected(self, k: int) -> float:
        """E(k): tokens a pass with k drafts emits at the running acceptance rate."""
        a = min(self.rate, 0.999)
        return (1 - a ** (k + 1)) / (1 - a)

    def next_k(self, others: float = 0.0, cost: Callable[[int], float] | None = None) -> int:
        """others: tokens the rest of the batch emits this step (0 at batch 1); cost: k ->
        relative step cost in that batch (default: the batch-1 cost). In a batch a draft must
        promise batch_margin more output than the plain step: a wrong k slows every sequence,
        and step times measured on a shared CPU move by ~10% step to step (bf16 at 4 streams
        lost 10-20% without the margin: 2026-12-04 stream benchmarks). Probes (k=1 after
        probe_every plain steps, to re-measure acceptance) run only alone: in a batch a probe
        pays the drafter's catch-up on every feature since its last draft and a verify row
        in every sequence's step, for a rate the controller then ignores (int8 at 4 streams,
        AVX2 EPYC: ~1 probe per 12 sequence-steps, 0.92x plain)."""
        cost = cost or self._cost
        best_k, best = 0, (others + 1.0) / cost(0) * (1.0 + (self.batch_margin if others > 0 else 0.0))
        for k in range(1, self.k_max + 1):
            gain = (others + self.expected(k)) / cost(k)
            if gain > best + 1e-9:
                best_k, best = k, gain
        if best_k == 0 and others <= 0:
            self._idle += 1
            if self._idle >= self.probe_every:
                self._idle = 0
                return 1
        return best_k

    def update(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        # per-token rate of a geometric acceptance model: kept / (kept + the one rejected)
        trials = accepted + (1 if accepted < drafted else 0)
        self.rate = self.decay * self.rate + (1 - self.decay) * (accepted / trials)
