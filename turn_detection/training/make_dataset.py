"""Write an end-of-turn benchmark dataset (NAME.wav + NAME.json, see benchmarks/turn.py)
from one split's voices and sentences (default: the held-out test split).

    python -m turn_detection.training.make_dataset --out DIR [--split test|validation|train] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from parley.wav import write_wav
from turn_detection.training.data import SPLITS, find_cut, speech_intervals, split, synthesize

LEAD_S, TAIL_S = 0.5, 3.5


def make_clip(speech: np.ndarray, kind: str, rng: np.random.Generator,
              gap_s: tuple[float, float] = (0.4, 1.0)) -> tuple[np.ndarray, dict]:
    """A complete clip, or a "paused" one (a pause of uniform(*gap_s) s at a word boundary)."""
    z = lambda s: np.zeros(int(s * ENGINE_RATE), dtype=np.float32)  # noqa: E731
    pauses = []
    if kind == "paused":
        cut = find_cut(speech, rng)
        gap = float(rng.uniform(*gap_s))
        pauses.append([LEAD_S + cut / ENGINE_RATE, LEAD_S + cut / ENGINE_RATE + gap])
        speech = np.concatenate([speech[:cut], z(gap), speech[cut:]])
    audio = np.concatenate([z(LEAD_S), speech, z(TAIL_S)])
    iv = [[round(s, 3), round(e, 3)] for s, e in speech_intervals(audio, gap_s=0.3)]
    return audio, {"speech": iv, "pauses": [[round(s, 3), round(e, 3)] for s, e in pauses],
                   "turn_end": iv[-1][1]}


def clips(split_name: str, rng: np.random.Generator):
    """Yield (name, audio [N], meta) for every voice x sentence x {complete, paused} of a split."""
    sents, voices = split(split_name)
    for vi, voice in enumerate(voices):
        for si, text in enumerate(sents):
            speech = synthesize(voice, text)
            for kind in ("complete", "paused"):
                audio, meta = make_clip(speech, kind, rng)
                meta = {"text": text, "kind": kind, **meta, "voice": voice.label, "index": vi}
                yield f"{voice.label}-s{si:02d}-{kind}", audio, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--split", choices=SPLITS, default="test")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    n = 0
    for name, audio, meta in clips(args.split, np.random.default_rng(args.seed)):
        write_wav(args.out / f"{name}.wav", audio, ENGINE_RATE)
        (args.out / f"{name}.json").write_text(json.dumps(meta))
        n += 1
    print(f"wrote {n} {args.split} clips to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
