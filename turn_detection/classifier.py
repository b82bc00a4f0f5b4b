"""P(turn finished) from prosodic features: a one-hidden-layer MLP (tanh) on standardized
features, a few KB of weights in an .npz shipped beside this module (see MODEL_CARD.md).
Size and L2 are chosen on the validation split (turn_detection/training/train.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from turn_detection.prosody import CONTEXT_S, FEATURE_NAMES, prosodic_features

DEFAULT_WEIGHTS = Path(__file__).with_name("eot_prosody.npz")


class ProsodyClassifier:
    context_s = CONTEXT_S  # audio before a pause that its features read

    def __init__(self, mean: np.ndarray, scale: np.ndarray, w1: np.ndarray, b1: np.ndarray,
                 w2: np.ndarray, b2: float):
        f = len(FEATURE_NAMES)
        if mean.shape != (f,) or scale.shape != (f,) or w1.ndim != 2 or w1.shape[0] != f:
            raise ValueError(f"classifier expects {f} features")
        if b1.shape != (w1.shape[1],) or w2.shape != (w1.shape[1],):
            raise ValueError("hidden layer shapes disagree")
        self.mean, self.scale = mean, scale  # [F]
        self.w1, self.b1, self.w2, self.b2 = w1, b1, w2, float(b2)  # [F, H], [H], [H], scalar

    @classmethod
    def load(cls, path: str | Path = DEFAULT_WEIGHTS) -> ProsodyClassifier:
        from parley.errors import ModelCorruptError, ModelNotFoundError

        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(str(path), "end-of-turn weights not found")
        try:
            z = np.load(path)
            return cls(z["mean"], z["scale"], z["w1"], z["b1"], z["w2"], float(z["b2"]))
        except (KeyError, ValueError, OSError) as e:
            raise ModelCorruptError(str(path), f"bad end-of-turn weights: {e}") from e

    def save(self, path: str | Path) -> None:
        np.savez(path, mean=self.mean.astype(np.float32), scale=self.scale.astype(np.float32),
                 w1=self.w1.astype(np.float32), b1=self.b1.astype(np.float32),
                 w2=self.w2.astype(np.float32), b2=np.float32(self.b2))

    @staticmethod
    def features(audio: np.ndarray, speech_end: int) -> np.ndarray:
        """audio [N] up to now, its speech ending at sample `speech_end` -> [F]: the prosodic
        features of the CONTEXT_S before the pause."""
        return prosodic_features(audio[max(0, speech_end - int(CONTEXT_S * ENGINE_RATE)) : max(0, speech_end)])

    def logits(self, x: np.ndarray) -> np.ndarray:
        """x [N, F] -> [N]."""
        h = np.tanh(((x - self.mean) / self.scale) @ self.w1 + self.b1)  # [N, H]
        return h @ self.w2 + self.b2

    def probability(self, features: np.ndarray) -> float:
        """features [F] -> P(finished)."""
        z = float(self.logits(features[None, :])[0])
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -30, 30))))

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, hidden: int = 16, l2: float = 3.0, seed: int = 0,
            exclude: tuple[int, ...] = ()) -> ProsodyClassifier:
        """x [N, F], y [N] in {0, 1}: class-balanced, L2-regularized, L-BFGS. Columns in
        `exclude` get zero input weights (they never influence P)."""
        from scipy.optimize import minimize

        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        mean[list(exclude)], scale[list(exclude)] = 0.0, 1.0
        xs = (x - mean) / scale  # [N, F]
        mask = np.ones((x.shape[1], 1))
        mask[list(exclude)] = 0.0
        xs = xs * mask[:, 0]
        f, h = x.shape[1], hidden
        sw = np.where(y > 0, 0.5 / y.mean(), 0.5 / (1 - y.mean()))  # balance the classes

        def unpack(w):
            return w[: f * h].reshape(f, h) * mask, w[f * h : f * h + h], w[f * h + h : f * h + 2 * h], w[-1]

        def loss(w):
            w1, b1, w2, b2 = unpack(w)
            hid = np.tanh(xs @ w1 + b1)  # [N, H]
            z = hid @ w2 + b2
            g = sw * (1 / (1 + np.exp(-z)) - y)
            gh = np.outer(g, w2) * (1 - hid**2)  # [N, H]
            value = (sw * (np.logaddexp(0, z) - y * z)).sum() + 0.5 * l2 * ((w1**2).sum() + (w2**2).sum())
            grad = [((xs.T @ gh + l2 * w1) * mask).ravel(), gh.sum(0), hid.T @ g + l2 * w2, [g.sum()]]
            return value, np.concatenate(grad)

        rng = np.random.default_rng(seed)
        w0 = np.concatenate([rng.normal(0, 0.3, f * h), np.zeros(h), rng.normal(0, 0.3, h), [0.0]])
        res = minimize(loss, w0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
        w1, b1, w2, b2 = unpack(res.x)
        return cls(mean, scale, w1, b1, w2, b2)
