"""Endpointing policy: how much P(turn finished) it takes to end the turn after a silence.

The detector re-checks the policy at every VAD window of the pause (every 32 ms), so the bar
falls as the silence grows: a pause the classifier finds final ends early, a doubtful one ends
later, and any pause ends at `max_wait_s`. P is recomputed when new evidence arrives during
the pause (an interim transcript); the audio features are fixed once speech has stopped."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

DEFAULT_POLICY = Path(__file__).with_name("eot_policy.json")


@dataclass(frozen=True)
class EndpointingPolicy:
    """After `eval_silence_s` of silence the classifier gives P. The turn ends at the first
    window where P >= threshold(silence): nothing before min_wait_s, `high` at min_wait_s,
    falling to `low` at max_wait_s (linearly in P when curve == 1; curve > 1 keeps the bar
    high longer, < 1 drops it sooner), anything at max_wait_s. A transcript ending on a
    function word multiplies P by text_penalty."""

    eval_silence_s: float = 0.064  # two VAD windows: the VAD's own end lag comes on top
    min_wait_s: float = 0.1
    max_wait_s: float = 1.6
    high: float = 0.7
    low: float = 0.2
    min_speech_s: float = 0.25  # less speech in the turn than this never ends it
    text_penalty: float = 0.3
    curve: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.eval_silence_s <= self.min_wait_s <= self.max_wait_s:
            raise ValueError("need 0 <= eval_silence_s <= min_wait_s <= max_wait_s")
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError("need 0 <= low < high <= 1")
        if self.min_speech_s < 0 or not 0.0 <= self.text_penalty <= 1.0:
            raise ValueError("min_speech_s must be >= 0 and text_penalty in [0, 1]")
        if not 0.1 <= self.curve <= 10.0:
            raise ValueError("curve must be in [0.1, 10]")

    def threshold(self, silence_s: float) -> float:
        """P(finished) needed to end the turn after `silence_s` of silence (> 1: not yet)."""
        return float(self.thresholds(np.array([silence_s]))[0])

    def thresholds(self, silence_s: np.ndarray) -> np.ndarray:
        """Vectorized `threshold`: [W] silences (nan: speaking) -> [W] (inf: not yet)."""
        s = np.asarray(silence_s, dtype=np.float64)
        frac = np.clip((s - self.min_wait_s) / (self.max_wait_s - self.min_wait_s + 1e-12), 0.0, 1.0) ** self.curve
        out = self.high - frac * (self.high - self.low)
        with np.errstate(invalid="ignore"):
            out = np.where(s >= self.max_wait_s, 0.0, out)
            return np.where((s < self.min_wait_s) | np.isnan(s), np.inf, out)

    def should_end(self, probability: float, silence_s: float) -> bool:
        return silence_s >= self.eval_silence_s and probability >= self.threshold(silence_s)

    def wait_s(self, probability: float) -> float:
        """Silence needed before ending the turn at a constant P (threshold's inverse)."""
        if probability >= self.high:
            return self.min_wait_s
        if probability <= self.low:
            return self.max_wait_s
        frac = ((self.high - probability) / (self.high - self.low)) ** (1.0 / self.curve)
        return self.min_wait_s + frac * (self.max_wait_s - self.min_wait_s)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path = DEFAULT_POLICY) -> EndpointingPolicy:
        """A policy written by `save` (the shipped one was chosen on validation clips)."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read endpointing policy {path}: {e}") from e
        names = {f.name for f in fields(cls)}
        if not isinstance(raw, dict) or not set(raw) <= names:
            raise ValueError(f"{path}: unknown policy fields {sorted(set(raw) - names) if isinstance(raw, dict) else raw}")
        return cls(**{k: float(v) for k, v in raw.items()})
