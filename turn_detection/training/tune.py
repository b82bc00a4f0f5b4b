"""Choose the endpointing policy on validation clips (seeded; the test split is never read).

    python -m turn_detection.training.tune [--out turn_detection/eot_policy.json] [--seed 0]
        [--max-fc 0.03]

The validation split's benchmark clips (complete, and paused mid-sentence for 0.4-1.0 s) are
streamed once through the real detector with a policy that never ends a turn, recording every
VAD window's silence and P. Each policy of GRID is then replayed on that trace (the decision
does not change what the detector sees before it) and scored exactly as `parley bench turn`
scores it; the lowest mean latency with at most the cap of false cutoffs wins. A policy chosen
this way on one half of validation cuts off about twice the cap on the other half (other
voices and sentences), so train.py sets the cap from such halves (held_out_cap). This script
re-chooses the policy alone for the shipped weights at `--max-fc`, on one validation set."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from turn_detection.detector import EndOfTurnDetector
from turn_detection.policy import DEFAULT_POLICY, EndpointingPolicy
from turn_detection.training.make_dataset import clips
from turn_detection.vad import WINDOW

FRAME_S = 0.02  # the benchmark pushes 20 ms frames: a decision is reported at its frame's end
BASE = EndpointingPolicy()
GRID_AXES = {
    "eval_silence_s": (0.032, 0.064),
    "min_wait_s": (0.032, 0.064, 0.1, 0.15, 0.2),
    "max_wait_s": (0.6, 0.8, 1.0, 1.2, 1.6),
    "high": (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98),
    "low": (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7),
    "curve": (0.5, 1.0, 2.0),
}


TARGET_FC = 0.05  # the operating point
CAPS = (0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05)  # validation caps tried for it


@dataclass(frozen=True)
class Trace:
    """Per VAD window of one clip: end time [W] s, silence [W] s (nan while speaking), P [W]
    (nan before the pause is evaluated); and the clip's turn end."""

    time_s: np.ndarray
    silence_s: np.ndarray
    probability: np.ndarray
    turn_end: float


def trace(detector: EndOfTurnDetector, audio: np.ndarray, turn_end: float) -> Trace:
    """Stream `audio` window by window through a never-ending copy of `detector`'s policy,
    recording the prosodic P alone (replayed policies must have audio_weight 1 and no text
    terms, or mix P first: training/loso.py)."""
    probe = replace(detector.policy, eval_silence_s=0.0, min_wait_s=60.0, max_wait_s=60.0,
                    audio_weight=1.0, text_weight=0.0, text_bias=0.0)  # the raw prosodic P
    stream = EndOfTurnDetector(detector.vad, detector.classifier, probe).stream()
    t, sil, prob = [], [], []
    for i in range(0, len(audio) - WINDOW + 1, WINDOW):
        stream.push(audio[i : i + WINDOW])
        t.append((i + WINDOW) / ENGINE_RATE)
        s, p = stream.silence_s, stream.probability
        sil.append(math.nan if s is None else s)
        prob.append(math.nan if p is None else p)
    return Trace(np.array(t), np.array(sil), np.array(prob), turn_end)


@dataclass(frozen=True)
class FeatureTrace:
    """A classifier-free trace: per window the index of its pause's features (-1: none yet)."""

    time_s: np.ndarray  # [W]
    silence_s: np.ndarray  # [W]
    pause: np.ndarray  # [W] int
    features: np.ndarray  # [P, F]
    turn_end: float

    def with_classifier(self, clf) -> Trace:
        p = 1 / (1 + np.exp(-clf.logits(self.features))) if len(self.features) else np.zeros(1)
        prob = np.where(self.pause >= 0, p[np.maximum(self.pause, 0)], np.nan)
        return Trace(self.time_s, self.silence_s, prob, self.turn_end)


def feature_trace(vad, audio: np.ndarray, turn_end: float, witness=None) -> FeatureTrace:
    """One clip streamed with no classifier (a model choice replays its pauses' features);
    `witness`: an AcousticClassifier for its features (None: the prosodic ones)."""
    base = EndOfTurnDetector(vad, witness, replace(BASE, eval_silence_s=0.0, min_wait_s=60.0, max_wait_s=60.0))
    stream = base.stream()
    t, sil, idx = [], [], []
    for i in range(0, len(audio) - WINDOW + 1, WINDOW):
        stream.push(audio[i : i + WINDOW])
        t.append((i + WINDOW) / ENGINE_RATE)
        sil.append(math.nan if stream.silence_s is None else stream.silence_s)
        idx.append(len(stream.evaluations) - 1 if stream.probability is not None else -1)
    feats = np.array([e.features for e in stream.evaluations]).reshape(len(stream.evaluations), -1)
    return FeatureTrace(np.array(t), np.array(sil), np.array(idx), feats, turn_end)


def feature_traces(vad, seed: int, split_name: str = "validation") -> list[FeatureTrace]:
    """The split's benchmark clips streamed once with no classifier (model choice replays them)."""
    return [feature_trace(vad, audio, meta["turn_end"]) for _, audio, meta in clips(split_name, np.random.default_rng(seed))]


FEATURE_CODE = ("prosody.py",)  # what the features of a pause depend on
# what the pauses collected from a split depend on (its sentences, voices, cuts and the detector)
SPLIT_CODE = ("detector.py", "vad.py", "training/data.py", "training/sentences.py", "training/requests/train-4.txt",
              "training/requests/validation-3.txt", "training/make_dataset.py")
TRACE_CODE = (*FEATURE_CODE, *SPLIT_CODE)


def code_digest(names: tuple[str, ...]) -> str:
    """Digest of turn_detection files (a cache entry made by other code is recomputed)."""
    root = Path(__file__).resolve().parents[1]
    return hashlib.sha1(b"".join((root / n).read_bytes() for n in names)).hexdigest()[:12]


def cached_feature_traces(vad, seed: int, cache, split_name: str = "validation") -> list[FeatureTrace]:
    """feature_traces(), kept in the directory `cache` (None: not kept) between runs."""
    path = Path(cache) / f"{split_name}-traces-seed{seed}-{code_digest(TRACE_CODE)}.npz" if cache else None
    if path and path.is_file():
        z = np.load(path)
        w, f = np.cumsum(z["windows"])[:-1], np.cumsum(z["pauses"])[:-1]
        parts = zip(np.split(z["time_s"], w), np.split(z["silence_s"], w), np.split(z["pause"], w),
                    np.split(z["features"], f), z["turn_end"])
        return [FeatureTrace(t, s, i, x, float(e)) for t, s, i, x, e in parts]
    out = feature_traces(vad, seed, split_name)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        cat = np.concatenate
        np.savez(path, time_s=cat([t.time_s for t in out]), silence_s=cat([t.silence_s for t in out]),
                 pause=cat([t.pause for t in out]), features=cat([t.features for t in out]),
                 windows=[len(t.time_s) for t in out], pauses=[len(t.features) for t in out],
                 turn_end=[t.turn_end for t in out])
    return out


def decision(tr: Trace, policy: EndpointingPolicy) -> float | None:
    """When `policy` would have ended the turn on this trace (the benchmark's time_s), with
    no transcript: P is the policy's weighting of the trace's prosodic P."""
    if policy.audio_weight != 1.0:
        tr = Trace(tr.time_s, tr.silence_s, policy.combine_many(tr.probability, None), tr.turn_end)
    return decisions(_Stacked([tr]), policy)[0]


@dataclass(frozen=True)
class _Stacked:
    """All traces' windows end to end, so a policy is replayed with a few array operations."""

    traces: list[Trace]

    def arrays(self, max_silence_s: float = math.inf) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Only the windows a policy can end on: P known, silence <= max_silence_s (pass at
        least one window past the longest max_wait_s replayed: every policy has fired by then)."""
        cat = np.concatenate
        clip = cat([np.full(len(tr.time_s), i) for i, tr in enumerate(self.traces)])
        t, sil = cat([tr.time_s for tr in self.traces]), cat([tr.silence_s for tr in self.traces])
        prob = cat([tr.probability for tr in self.traces])
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(prob) & (sil <= max_silence_s)
        return clip[keep], t[keep], sil[keep], prob[keep]


def decisions(stacked: _Stacked, policy: EndpointingPolicy, arrays=None) -> list[float | None]:
    clip, t, sil, prob = arrays or stacked.arrays()
    with np.errstate(invalid="ignore"):
        ok = (sil >= policy.eval_silence_s) & (prob >= policy.thresholds(sil))
    hits = np.flatnonzero(ok)
    first_clip, idx = np.unique(clip[hits], return_index=True)
    out: list[float | None] = [None] * len(stacked.traces)
    for c, h in zip(first_clip, hits[idx]):
        out[int(c)] = math.ceil(t[h] / FRAME_S - 1e-6) * FRAME_S
    return out


def grid() -> list[EndpointingPolicy]:
    out = []
    for values in itertools.product(*GRID_AXES.values()):
        kw = dict(zip(GRID_AXES, values))
        if kw["low"] < kw["high"] and kw["eval_silence_s"] <= kw["min_wait_s"]:
            out.append(replace(BASE, **kw))
    return out


def sweep(traces: list[Trace], policies: list[EndpointingPolicy]) -> list[tuple[EndpointingPolicy, dict]]:
    from benchmarks.turn import score_times

    stacked = _Stacked(traces)
    arrays = stacked.arrays(max(p.max_wait_s for p in policies) + 2 * WINDOW / ENGINE_RATE)
    turn_ends = [tr.turn_end for tr in traces]
    return [(p, score_times(decisions(stacked, p, arrays), turn_ends)) for p in policies]


def best(results: list[tuple[EndpointingPolicy, dict]], max_fc: float) -> tuple[EndpointingPolicy, dict]:
    ok = [(p, s) for p, s in results if s["false_cutoff_rate"] <= max_fc and "latency_mean_s" in s]
    if not ok:
        raise ValueError(f"no policy reaches <= {max_fc:.0%} false cutoffs")
    return min(ok, key=lambda ps: (ps[1]["latency_mean_s"], ps[1]["false_cutoff_rate"]))


def halves(n_voices: int, n_sentences: int, repeats: int) -> np.ndarray:
    """Half of each benchmark clip of a split (feature_traces order, repeats end to end):
    0 = even voice and even sentence, 1 = odd and odd, -1 = neither (the halves share no
    voice and no sentence, like validation and test)."""
    v, s = np.divmod(np.arange(n_voices * n_sentences * 2) // 2, n_sentences)
    one = np.where((v % 2 == 0) & (s % 2 == 0), 0, np.where((v % 2 == 1) & (s % 2 == 1), 1, -1))
    return np.tile(one, repeats)


def held_out_cap(traces: list[Trace], half: np.ndarray, policies: list[EndpointingPolicy],
                 caps: tuple[float, ...], target: float) -> tuple[float, list[tuple[float, float]]]:
    """The cap to choose the policy with, from validation alone: for each cap the policy
    chosen on one half is scored on the other (both ways). -> (the largest cap whose worse
    held-out false-cutoff rate, and that of every smaller cap, is <= target (a lucky cap
    above an unlucky one does not count), else the smallest cap; per cap (worse held-out FC,
    mean held-out latency))."""
    res = [sweep([t for t, h in zip(traces, half) if h == k], policies) for k in (0, 1)]
    rows = []
    for cap in caps:
        fc, lat = [], []
        for k in (0, 1):
            try:
                chosen = best(res[k], cap)[0]
            except ValueError:  # no policy reaches this cap on this half: the cap fails
                fc.append(1.0)
                lat.append(math.nan)
                continue
            held = res[1 - k][next(i for i, (p, _) in enumerate(res[k]) if p is chosen)][1]
            fc.append(held["false_cutoff_rate"])
            lat.append(held.get("latency_mean_s", math.nan))
        rows.append((max(fc), float(np.mean(lat))))
    envelope = np.maximum.accumulate([fc for fc, _ in rows])
    ok = [c for c, fc in zip(caps, envelope) if fc <= target]
    return (max(ok) if ok else min(caps)), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(DEFAULT_POLICY))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-fc", type=float, default=0.03)
    args = ap.parse_args(argv)
    det = EndOfTurnDetector.load(policy=BASE)
    traces = [trace(det, audio, meta["turn_end"])
              for _, audio, meta in clips("validation", np.random.default_rng(args.seed))]
    policies = grid()
    results = sweep(traces, policies)
    for cap in (args.max_fc, 0.05, 0.10):
        p, s = best(results, cap)
        print(f"validation, <= {cap:.0%} FC: FC {s['false_cutoff_rate']:.1%}, mean {s['latency_mean_s']:.3f} s, "
              f"p50 {s['latency_p50_s']:.3f} s: {p}")
    chosen, s = best(results, args.max_fc)
    chosen.save(args.out)
    print(f"{len(traces)} validation clips, {len(policies)} policies; saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
