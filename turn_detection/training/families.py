"""Synthesizer families for leave-one-family-out validation (issue 21).

The prosodic model learned the two synthesizers it was trained on (Piper joe, espeak-ng) and
cut off 31% of turns spoken by voices it never heard. Each family here is one synthesizer
(or the old test split), speaking the 48 request sentences of `requests/families.txt`, which
are in no other set (checked by a test). Per family every sentence is spoken once, by its
voices in turn, complete and with one mid-sentence pause of 0.5-1.5 s (the outside check's
range): 96 clips a family.

    python -m turn_detection.training.families --out DIR [--family NAME ...] [--seed 0]

writes NAME.wav + NAME.json (with "family") for `parley bench turn --data DIR`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from parley.wav import write_wav
from turn_detection.training.data import TEST_VOICES, Voice, synthesize
from turn_detection.training.make_dataset import clips, make_clip
from turn_detection.training.sentences import REQUESTS

FAMILIES: dict[str, tuple[Voice, ...]] = {
    # the old test split's voices, new sentences
    "piper": tuple(v for v in TEST_VOICES if v.engine == "piper"),
    "espeak": tuple(v for v in TEST_VOICES if v.engine == "espeak"),
    # never in training: Debian flite's built-in voices and festival's diphone and HTS voices
    "flite": tuple(Voice("flite", n, 1.0) for n in ("kal", "kal16", "awb", "rms", "slt")),
    "festival": tuple(Voice("festival", n, 1.0) for n in ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")),
}
OLD_TEST = "test-split"  # the first model cards' test clips, kept as one more family
FAMILY_NAMES = (*FAMILIES, OLD_TEST)
GAP_S = (0.5, 1.5)


def family_sentences() -> tuple[str, ...]:
    lines = (REQUESTS / "families.txt").read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip())


def family_clips(family: str, rng: np.random.Generator):
    """Yield (name, audio [N], meta) for one family (see the module doc)."""
    if family == OLD_TEST:
        for name, audio, meta in clips("test", rng):
            yield f"{OLD_TEST}-{name}", audio, {**meta, "family": OLD_TEST}
        return
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILY_NAMES}, got {family!r}")
    voices = FAMILIES[family]
    for si, text in enumerate(family_sentences()):
        voice = voices[si % len(voices)]
        speech = synthesize(voice, text)
        for kind in ("complete", "paused"):
            audio, meta = make_clip(speech, kind, rng, GAP_S)
            meta = {"text": text, "kind": kind, **meta, "voice": voice.label, "family": family}
            yield f"{family}-{voice.label}-s{si:02d}-{kind}", audio, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--family", nargs="*", choices=FAMILY_NAMES, default=list(FAMILY_NAMES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for family in args.family:
        n = 0
        for name, audio, meta in family_clips(family, np.random.default_rng(args.seed)):
            write_wav(args.out / f"{name}.wav", audio, ENGINE_RATE)
            (args.out / f"{name}.json").write_text(json.dumps(meta))
            n += 1
        print(f"{family}: wrote {n} clips to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
