"""P(turn finished) from prosodic features: standardized logistic regression, weights in a
few-hundred-byte .npz shipped beside this module (see MODEL_CARD.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from turn_detection.prosody import FEATURE_NAMES

DEFAULT_WEIGHTS = Path(__file__).with_name("eot_prosody.npz")


class ProsodyClassifier:
    def __init__(self, mean: np.ndarray, scale: np.ndarray, weights: np.ndarray, bias: float):
        n = len(FEATURE_NAMES)
        if not (mean.shape == scale.shape == weights.shape == (n,)):
            raise ValueError(f"classifier arrays must all be [{n}]")
        self.mean, self.scale, self.weights, self.bias = mean, scale, weights, float(bias)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_WEIGHTS) -> ProsodyClassifier:
        from parley.errors import ModelCorruptError, ModelNotFoundError

        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(str(path), "end-of-turn weights not found")
        try:
            z = np.load(path)
            return cls(z["mean"], z["scale"], z["weights"], float(z["bias"]))
        except (KeyError, ValueError, OSError) as e:
            raise ModelCorruptError(str(path), f"bad end-of-turn weights: {e}") from e

    def save(self, path: str | Path) -> None:
        np.savez(path, mean=self.mean, scale=self.scale, weights=self.weights, bias=np.float64(self.bias))

    def probability(self, features: np.ndarray) -> float:
        """features [len(FEATURE_NAMES)] -> P(finished)."""
        z = float(((features - self.mean) / self.scale) @ self.weights + self.bias)
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -30, 30))))

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, l2: float = 1.0) -> ProsodyClassifier:
        """x [N, F], y [N] in {0, 1}: L2-regularized logistic regression (L-BFGS)."""
        from scipy.optimize import minimize

        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        xs = (x - mean) / scale  # [N, F]
        pos = y.mean()
        sw = np.where(y > 0, 0.5 / pos, 0.5 / (1 - pos))  # balance the classes

        def loss(wb):
            w, b = wb[:-1], wb[-1]
            z = xs @ w + b
            p = 1 / (1 + np.exp(-z))
            ll = sw * (np.logaddexp(0, z) - y * z)
            g = sw * (p - y)
            return ll.sum() + 0.5 * l2 * w @ w, np.concatenate([xs.T @ g + l2 * w, [g.sum()]])

        res = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B")
        return cls(mean, scale, res.x[:-1], res.x[-1])
