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
# the policy for a text witness that is the voice LLM (pipeline.turn_text), chosen the same way
# on that witness's P (loso --text-scores): its P is calibrated differently from the word scorer's
LLM_TEXT_POLICY = Path(__file__).with_name("eot_policy_llm.json")
# the same, for the probe on the embedded LLM's hidden state (pipeline.turn_probe), whose P is
# calibrated on complete turns vs their prefixes
LLM_PROBE_POLICY = Path(__file__).with_name("eot_policy_llm_probe.json")


def _logit(p) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


@dataclass(frozen=True)
class EndpointingPolicy:
    """After `eval_silence_s` of silence the classifier gives P. The turn ends at the first
    window where P >= threshold(silence): nothing before min_wait_s, `high` at min_wait_s,
    falling to `low` at max_wait_s (linearly in P when curve == 1; curve > 1 keeps the bar
    high longer, < 1 drops it sooner), anything at max_wait_s.

    P combines the prosodic P_a and, once a transcript of the turn is known, the text
    completeness P_t in log-odds: logit P = audio_weight * logit P_a
    + text_weight * logit P_t + text_bias (no transcript: the text terms are left out)."""

    eval_silence_s: float = 0.064  # two VAD windows: the VAD's own end lag comes on top
    min_wait_s: float = 0.1
    max_wait_s: float = 1.6
    high: float = 0.7
    low: float = 0.2
    min_speech_s: float = 0.25  # less speech in the turn than this never ends it
    curve: float = 1.0
    audio_weight: float = 1.0
    text_weight: float = 0.0
    text_bias: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.eval_silence_s <= self.min_wait_s <= self.max_wait_s:
            raise ValueError("need 0 <= eval_silence_s <= min_wait_s <= max_wait_s")
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError("need 0 <= low < high <= 1")
        if self.min_speech_s < 0:
            raise ValueError("min_speech_s must be >= 0")
        if not (0.0 <= self.audio_weight <= 10.0 and 0.0 <= self.text_weight <= 10.0 and abs(self.text_bias) <= 20.0):
            raise ValueError("audio_weight and text_weight must be in [0, 10], |text_bias| <= 20")
        if not 0.1 <= self.curve <= 10.0:
            raise ValueError("curve must be in [0.1, 10]")

    def combine(self, audio_p: float, text_p: float | None) -> float:
        """P(turn finished) from the prosodic P and the text P (None: no transcript yet)."""
        return float(self.combine_many(np.array([audio_p]), None if text_p is None else np.array([text_p]))[0])

    def combine_many(self, audio_p: np.ndarray, text_p: np.ndarray | None) -> np.ndarray:
        """Vectorized `combine`; nan in text_p means no transcript at that point."""
        z = self.audio_weight * _logit(audio_p)
        if text_p is not None and self.text_weight + abs(self.text_bias) > 0:
            t = np.asarray(text_p, dtype=np.float64)
            z = z + np.where(np.isnan(t), 0.0, self.text_weight * _logit(np.nan_to_num(t, nan=0.5)) + self.text_bias)
        return 1.0 / (1.0 + np.exp(-z))

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
