"""A linear probe on the voice LLM's last hidden state: P(the user's words so far are a whole turn).

The LLM's own P(the next token ends the sentence or the message) (pipeline.turn_text) ranks
prefixes of one request well but is calibrated for written chat, where requests go on: a whole
spoken command, "Turn the living room lights down to 30 percent", gets 0.24, "Play some jazz
music" 0.25, so the policy has to wait ~2 s on them. The same prefill's final hidden state [H]
holds what the model knows about the words; a logistic regression on it, fit on complete
request sentences (1) against their word prefixes (0), says 0.90 and 0.43 there and <= 0.003
after "down to" or "Play some". It reads text only (no voice is in its data): the TRAIN request
sentences and short answers (training/requests/answers.txt: "Yes, please.", "What about
Friday?"), each after the system prompt alone and after a short history of earlier turns (for
an answer, one that ends on the agent's question); L2 chosen on VALIDATION by mean
per-sentence AUC (the worse of the two contexts); TEST read once, after the choice.

    python -m pipeline.turn_probe [--out pipeline/eot_llm_probe.npz] [--report FILE.json]

A probe belongs to one model's hidden states: it records the model and the hidden size, and the
session uses it only with that model (the embedded one); another model keeps the raw P."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_PROBE = Path(__file__).with_name("eot_llm_probe.npz")
L2_GRID = (10.0, 30.0, 100.0, 300.0, 1000.0)
# the agent's side of the earlier exchanges the probe is fit after (conversations())
REPLIES = ("Sure, done.", "It should be sunny and mild, around twenty degrees.", "Okay, I have set that up for you.",
           "The nearest one is about ten minutes away on foot.", "I added it to your list.",
           "Sorry, I cannot do that yet, but I can remind you later.")
# the agent's questions a short answer follows (answers' histories)
ASKS = ("Should I book it for you?", "Do you want me to add anything else?",
        "Would you like the short version or the long one?")


@dataclass(frozen=True, eq=False)
class TextProbe:
    """P = sigmoid(weights . (hidden - mean) / scale + bias)."""

    mean: np.ndarray  # [H] the training states' mean
    scale: np.ndarray  # [H] their standard deviation
    weights: np.ndarray  # [H] on the standardized state
    bias: float
    model: str  # the model whose hidden states it reads

    def __post_init__(self) -> None:
        arrays = (self.mean, self.scale, self.weights)
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 and a.shape == self.mean.shape and a.size
                   for a in arrays):
            raise ValueError("mean, scale and weights must be non-empty 1-D arrays of one length")
        if not (all(np.isfinite(a).all() for a in arrays) and np.isfinite(self.bias) and (self.scale > 0).all()):
            raise ValueError("probe parameters must be finite, scale > 0")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("model must name the LLM the probe reads")

    @property
    def hidden_size(self) -> int:
        return int(self.mean.shape[0])

    def probability(self, hidden: Any) -> float:
        """hidden: the final hidden state [H] (a torch tensor or an array)."""
        h = np.asarray(hidden.numpy() if hasattr(hidden, "numpy") else hidden, dtype=np.float64)
        if h.shape != self.mean.shape or not np.isfinite(h).all():
            raise ValueError(f"hidden must be a finite [{self.hidden_size}] state, got shape {h.shape}")
        z = float(((h - self.mean) / self.scale) @ self.weights + self.bias)
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0))))

    @classmethod
    def fit(cls, states: np.ndarray, labels: np.ndarray, l2: float, model: str) -> TextProbe:
        """states [N, H], labels [N] (1: a complete turn) -> the probe (classes balanced)."""
        from turn_detection.training.train_text import logistic

        x = np.asarray(states, dtype=np.float64)
        mean, scale = x.mean(0), x.std(0) + 1e-6
        w, b = logistic((x - mean) / scale, np.asarray(labels, dtype=np.float64), l2, maxiter=2000)
        return cls(mean, scale, w, b, model)

    def save(self, path: str | Path) -> None:
        np.savez(path, mean=self.mean, scale=self.scale, weights=self.weights, bias=np.float64(self.bias),
                 model=np.str_(self.model))

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PROBE) -> TextProbe:
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(z["mean"].astype(np.float64), z["scale"].astype(np.float64),
                           z["weights"].astype(np.float64), float(z["bias"]), str(z["model"]))
        except (OSError, KeyError, ValueError, EOFError) as e:
            raise ValueError(f"cannot read the text probe {path}: {e}") from e


def states(engine: Any, scorer: Any, texts: list[str], timeout_s: float = 30.0) -> tuple[np.ndarray, np.ndarray]:
    """-> (the raw P [N], the final hidden states [N, H]) of `texts`, each asked as the session
    asks it (scorer: a pipeline.turn_text.EngineCompletenessScorer on `engine`)."""
    ps, hs = [], []
    for text in texts:
        scored = engine.score_prompt(scorer.prompt_ids(text), scorer.end_ids, timeout_s=timeout_s)
        if scored is None:
            raise RuntimeError(f"the engine gave no score for {text!r} in {timeout_s} s")
        ps.append(scored.next_token_p)
        hs.append(scored.hidden.numpy())
    return np.array(ps), np.stack(hs).astype(np.float64)


def per_sentence_auc(p: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> float:
    """Mean over sentences of the AUC of the complete text against its own prefixes."""
    aucs = []
    for g in np.unique(groups):
        m = groups == g
        full, pre = p[m][labels[m] > 0], p[m][labels[m] == 0]
        if len(full) and len(pre):
            aucs.append(float(np.mean(full[0] > pre) + 0.5 * np.mean(full[0] == pre)))
    return float(np.mean(aucs))


def summary(p: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    return {"mean_auc": round(per_sentence_auc(p, labels, groups), 4),
            "complete_median": round(float(np.median(p[labels > 0])), 3),
            "prefix_median": round(float(np.median(p[labels == 0])), 4),
            "prefix_above_half": round(float(np.mean(p[labels == 0] > 0.5)), 3),
            "complete_below_half": round(float(np.mean(p[labels > 0] <= 0.5)), 3)}


def conversations(system: list[dict[str, str]], sentences: tuple[str, ...], n: int) -> list[list[dict[str, str]]]:
    """n contexts for the user's words: the system prompt alone, then n - 1 with two earlier
    exchanges (the user's from `sentences`, the agent's from REPLIES). A session's witness reads
    the words after its history, which moves the hidden state: a probe fit on the system prompt
    alone put 12.7% of VALIDATION prefixes above 0.5 after two exchanges, 8.4% without."""
    out = [system]
    for k in range(1, n):
        turns: list[dict[str, str]] = []
        for j in range(2):
            turns += [{"role": "user", "content": sentences[(7 * k + 3 * j) % len(sentences)]},
                      {"role": "assistant", "content": REPLIES[(2 * k + j) % len(REPLIES)]}]
        out.append([*system, *turns])
    return out


def asking(system: list[dict[str, str]], sentences: tuple[str, ...], n: int) -> list[list[dict[str, str]]]:
    """n contexts for a short answer: one exchange (the user's from `sentences`) whose reply
    ends on a question (ASKS)."""
    return [[*system, {"role": "user", "content": sentences[(5 * k) % len(sentences)]},
             {"role": "assistant", "content": ASKS[k % len(ASKS)]}] for k in range(n)]


def split_states(engine: Any, fallback: Any, system: list[dict[str, str]], sentences: tuple[str, ...],
                 answers: tuple[str, ...] = (), wholes: tuple[str, ...] = ()) -> dict:
    """Each sentence's and answer's prefixes (groups: the sentences, then the answers; an
    answer's prefix that is one of `wholes` is left out) after the system prompt alone
    ("system") and after one of three histories ("history", by sentence; an answer's ends on a
    question) -> {context: (raw P, states, labels, groups)}."""
    from pipeline.turn_text import EngineCompletenessScorer
    from turn_detection.training.text_corpus import text_prefixes

    texts, labels, groups = text_prefixes(sentences)
    more, more_labels, more_groups = text_prefixes(answers, wholes)
    texts, labels = texts + more, np.concatenate([labels, more_labels])
    groups = np.concatenate([groups, more_groups + len(sentences)]).astype(int)
    contexts = conversations(system, sentences, 4) + asking(system, sentences, 3)
    n = len(sentences)
    out = {}
    for name, pick in (("system", lambda g: 0), ("history", lambda g: (1 if g < n else 4) + g % 3)):
        ps, hs = np.zeros(len(texts)), np.zeros((len(texts), engine.model.cfg.hidden_size))
        for c in sorted({pick(g) for g in groups}):
            idx = [i for i, g in enumerate(groups) if pick(g) == c]
            scorer = EngineCompletenessScorer(engine, fallback, context=lambda c=c: contexts[c], timeout_s=30.0)
            ps[idx], hs[idx] = states(engine, scorer, [texts[i] for i in idx])
        out[name] = (ps, hs, labels, groups)
    return out


def figures(p: np.ndarray, labels: np.ndarray, groups: np.ndarray, n_sentences: int) -> dict:
    """summary() of the request sentences (groups < n_sentences), and of the answers apart:
    their wholes' median P and share at or below 0.5, their prefixes' share above 0.5."""
    req, ans = groups < n_sentences, groups >= n_sentences
    out = summary(p[req], labels[req], groups[req])
    whole, pre = p[ans & (labels > 0)], p[ans & (labels == 0)]
    if len(whole):
        out |= {"answers_median": round(float(np.median(whole)), 3),
                "answers_below_half": round(float(np.mean(whole <= 0.5)), 3),
                "answer_prefixes_above_half": round(float(np.mean(pre > 0.5)), 3) if len(pre) else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_PROBE))
    ap.add_argument("--report", help="write the validation and test figures here (JSON)")
    args = ap.parse_args(argv)
    from llm_engine import LLMEngine
    from llm_engine.engine import DEFAULT_MODEL
    from pipeline.config import DEFAULT_INSTRUCTIONS
    from turn_detection.completeness import CompletenessScorer
    from turn_detection.training import sentences as S
    from turn_detection.training.train_text import choose_l2

    engine = LLMEngine.for_voice()
    system = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}]
    splits = {"train": (S.TRAIN, S.ANSWERS_TRAIN), "validation": (S.VALIDATION, S.ANSWERS_VALIDATION),
              "test": (S.TEST, S.ANSWERS_TEST)}
    wholes = (*S.ANSWERS_TRAIN, *S.ANSWERS_VALIDATION, *S.ANSWERS_TEST)
    try:
        data = {name: (split_states(engine, CompletenessScorer.load(), system, sents, answers, wholes), len(sents))
                for name, (sents, answers) in splits.items()}
    finally:
        engine.close()
    x = np.concatenate([data["train"][0][c][1] for c in ("system", "history")])
    y = np.concatenate([data["train"][0][c][2] for c in ("system", "history")])

    def scored(probe: TextProbe, split: str) -> dict:
        states_, n = data[split]
        return {c: figures(np.array([probe.probability(h) for h in hs]), ys, gs, n)
                for c, (_, hs, ys, gs) in states_.items()}

    def validate(probe: TextProbe) -> dict:  # the worse context decides
        figs = scored(probe, "validation")
        return {"mean_auc": min(f["mean_auc"] for f in figs.values()), **figs}

    l2, probe, val = choose_l2(L2_GRID, lambda l2: TextProbe.fit(x, y, l2, DEFAULT_MODEL), validate)
    test = scored(probe, "test")
    raw = {c: figures(ps, ys, gs, data["test"][1]) for c, (ps, _, ys, gs) in data["test"][0].items()}
    print(f"chosen l2={l2}; test (read once, after the choice) {test}")
    print(f"the raw P on test: {raw}")
    probe.save(args.out)
    if args.report:
        Path(args.report).write_text(json.dumps({"command": "python -m pipeline.turn_probe", "l2": l2,
                                                 "validation": val, "test": test, "raw_test": raw}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
