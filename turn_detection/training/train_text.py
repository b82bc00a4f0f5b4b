"""Train the text completeness scorer (seconds on one core, seeded).

    python -m turn_detection.training.train_text [--out turn_detection/eot_text.npz]

Examples: every TRAIN request sentence, complete (positive) and cut after every word (negatives; positives weighted to balance the classes).
L2-regularized logistic regression (L-BFGS on a sparse design matrix; deterministic); L2 chosen on the
VALIDATION sentences by mean per-sentence AUC (complete vs its own prefixes); TEST sentences
are scored once, after the choice, and reported."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from turn_detection.completeness import DEFAULT_TEXT_WEIGHTS, HASH_BITS, CompletenessScorer, feature_ids
from turn_detection.training.sentences import TEST, TRAIN, VALIDATION
from turn_detection.training.text_corpus import examples

L2_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)


def design(texts: list[list[str]], bits: int = HASH_BITS):
    from scipy.sparse import csr_matrix

    rows, cols = [], []
    for i, words in enumerate(texts):
        ids = np.unique(feature_ids(words, bits))
        rows.append(np.full(len(ids), i))
        cols.append(ids)
    r, c = np.concatenate(rows), np.concatenate(cols)
    return csr_matrix((np.ones(len(r)), (r, c)), shape=(len(texts), 1 << bits))


def logistic(x, labels: np.ndarray, l2: float, maxiter: int = 500) -> tuple[np.ndarray, float]:
    """L2-regularized logistic regression, the classes balanced (positives weighted up), by
    L-BFGS from zeros (deterministic). x: [N, F] dense or sparse -> (weights [F], bias)."""
    from scipy.optimize import minimize

    pos = labels.sum()
    sw = np.where(labels > 0, (len(labels) - pos) / max(pos, 1.0), 1.0)
    sw = sw / sw.mean()

    def loss(theta: np.ndarray):
        w, b = theta[:-1], theta[-1]
        z = x @ w + b
        p = 1.0 / (1.0 + np.exp(-z))
        ll = sw * (np.logaddexp(0.0, z) - labels * z)
        g = sw * (p - labels)
        grad = np.concatenate([x.T @ g + l2 * w, [g.sum()]]) / len(labels)
        return (ll.sum() + 0.5 * l2 * w @ w) / len(labels), grad

    res = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    return res.x[:-1], float(res.x[-1])


def fit(texts: list[list[str]], labels: np.ndarray, l2: float, bits: int = HASH_BITS) -> CompletenessScorer:
    return CompletenessScorer(*logistic(design(texts, bits), labels, l2))


def ranking(scorer: CompletenessScorer, sentences) -> dict:
    """Per held-out sentence: AUC of the complete text against its own prefixes, and whether it
    outscores every prefix. Also the rate of prefixes above 0.5 and of complete texts below."""
    aucs, tops, fp, fn = [], [], [], []
    for s in sentences:
        texts, labels, _ = examples([s])
        p = np.array([scorer.probability(" ".join(t)) for t in texts])
        full, pre = p[labels > 0][0], p[labels == 0]
        aucs.append(float(np.mean(full > pre) + 0.5 * np.mean(full == pre)) if len(pre) else 1.0)
        tops.append(bool(np.all(full > pre)))
        fp += list(pre > 0.5)
        fn.append(full <= 0.5)
    return {"sentences": len(sentences), "mean_auc": float(np.mean(aucs)), "top_rate": float(np.mean(tops)),
            "prefix_above_half": float(np.mean(fp)), "complete_below_half": float(np.mean(fn))}


def choose_l2(grid, fit_one: Callable[[float], Any], validate: Callable[[Any], dict]) -> tuple[float, Any, dict]:
    """Fit at each L2 of `grid` and keep the best mean per-sentence AUC on validation (each
    printed). -> (l2, model, its validation figures)."""
    best = None
    for l2 in grid:
        model = fit_one(l2)
        val = validate(model)
        print(f"l2={l2:6.1f} validation {val}")
        if best is None or val["mean_auc"] > best[2]["mean_auc"]:
            best = (l2, model, val)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_TEXT_WEIGHTS))
    args = ap.parse_args(argv)
    sentences = list(TRAIN)
    texts, labels, _ = examples(sentences)
    print(f"{len(sentences)} sentences, {len(texts)} examples ({int(labels.sum())} complete)")
    l2, scorer, _ = choose_l2(L2_GRID, lambda l2: fit(texts, labels, l2), lambda m: ranking(m, VALIDATION))
    print(f"chosen l2={l2}; train {ranking(scorer, TRAIN[:200])}")
    print(f"test (read once, after the choice) {ranking(scorer, TEST)}")
    scorer.save(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
