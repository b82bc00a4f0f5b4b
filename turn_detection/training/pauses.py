"""The prosodic model's training pauses over every synthesizer engine, augmented (issue 21).

The fourth card's model was fit on Piper joe and espeak-ng alone and put P 0.97 inside pauses
of flite / festival voices. Here every engine speaks TRAIN sentences only (never the
families' or validation's): Piper joe at three rates, six espeak-ng voices, Debian flite's five
built-in voices and festival's three American voices; each engine's voices take disjoint
slices of the 400 train sentences. Per utterance: the complete utterance and twice a prefix cut
at a word boundary (training/train.py's recipe), each, with probability `p_augment`, sped up or
slowed down and passed through another channel (training/augment.py). Every clip is streamed
through the real detector stream; each pause it evaluates is one example (features, label:
1 only at the end of a complete utterance), tagged with its engine, so leave-one-family-out
can fit the model without the held-out family's synthesizer.

    python -m turn_detection.training.pauses --cache DIR [--per-voice 40] [--seed 0] [--witness acoustic]

With --witness acoustic each pause's features are Whisper's encoder states (acoustic.py), for
`loso --witness acoustic` (tried, not shipped: MODEL_CARD.md, ninth card).

Features are cached per voice in DIR (keyed by the feature / detector code), so a rerun or a
new engine costs only what changed. ~1 s a sentence on one core (synthesis + VAD + features)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from turn_detection.detector import EndOfTurnDetector
from turn_detection.training.augment import channel, perturb_speed
from turn_detection.training.data import TRAIN_VOICES, Voice, synthesize
from turn_detection.training.make_dataset import make_clip
from turn_detection.training.sentences import TRAIN
from turn_detection.training.train import PROBE
from turn_detection.training.tune import TRACE_CODE, code_digest
from turn_detection.vad import SileroVAD

VOICES: tuple[Voice, ...] = (
    *(v for v in TRAIN_VOICES if v.engine == "piper" and v.rate in (0.8, 1.1, 1.4)),
    *tuple(v for v in TRAIN_VOICES if v.engine == "espeak")[::3],  # 6 of the 18
    *(Voice("flite", n, 1.0) for n in ("kal", "kal16", "awb", "rms", "slt")),
    *(Voice("festival", n, 1.0) for n in ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")),
)
ENGINES = ("piper", "espeak", "flite", "festival")
CODE = (*TRACE_CODE, "training/augment.py", "training/pauses.py")


@dataclass(frozen=True)
class PauseSet:
    features: np.ndarray  # [N, F]
    labels: np.ndarray  # [N] 1.0 at the end of a complete utterance
    engines: np.ndarray  # [N] str: the synthesizer engine that spoke it

    def without(self, engine: str | None) -> PauseSet:
        keep = self.engines != engine
        return PauseSet(self.features[keep], self.labels[keep], self.engines[keep])


def voice_sentences(voice: Voice, per_voice: int) -> tuple[str, ...]:
    """`per_voice` TRAIN sentences; the voices of one engine take disjoint slices."""
    same = [v for v in VOICES if v.engine == voice.engine]
    start = same.index(voice) * per_voice if voice in same else 0
    return tuple(TRAIN[(start + i) % len(TRAIN)] for i in range(per_voice))


def voice_pauses(voice: Voice, per_voice: int, vad: SileroVAD, rng: np.random.Generator,
                 p_augment: float = 0.7, witness=None) -> tuple[np.ndarray, np.ndarray]:
    """-> features [N, F], labels [N] of one voice's clips (see the module doc); `witness`: an
    AcousticClassifier for its features (None: the prosodic ones). Its features include the
    silence read so far, so its pauses are read where the shipped policies read them (32 ms)."""
    probe = replace(PROBE) if witness is None else replace(PROBE, eval_silence_s=0.032)
    stream = EndOfTurnDetector(vad, witness, probe).stream()
    xs, ys = [], []
    for text in voice_sentences(voice, per_voice):
        speech = synthesize(voice, text)
        for kind in ("complete", "paused", "paused"):
            aug = rng.random() < p_augment
            audio, meta = make_clip(perturb_speed(speech, rng) if aug else speech, kind, rng)
            if kind == "paused":  # the prefix alone, then silence: the cut is never the end
                cut_end = meta["pauses"][0][0]
                audio = audio[: int((cut_end + 2.0) * ENGINE_RATE)]
                audio[int(cut_end * ENGINE_RATE) :] = 0.0
            if aug:
                audio = channel(audio, rng)
            stream.reset()
            for i in range(0, len(audio), 320):
                stream.push(audio[i : i + 320])
            for ev in stream.evaluations:
                xs.append(ev.features)
                ys.append(float(kind == "complete" and ev.speech_end_s >= meta["turn_end"] - 0.15))
    return np.array(xs, dtype=np.float32).reshape(len(xs), -1), np.array(ys)


def load(cache: str | Path, per_voice: int = 40, seed: int = 0, vad: SileroVAD | None = None,
         log=print, witness=None) -> PauseSet:
    """Every voice's pauses, from `cache` where present (computed and stored otherwise);
    `witness` as in voice_pauses."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    digest = code_digest(CODE if witness is None else (*CODE, "acoustic.py"))
    kind = "" if witness is None else "acoustic-"
    xs, ys, es = [], [], []
    for vi, voice in enumerate(VOICES):
        path = cache / f"{kind}{voice.label}-n{per_voice}-seed{seed}-{digest}.npz"
        if path.is_file():
            with np.load(path) as z:
                x, y = z["x"], z["y"]
        else:
            vad = vad or SileroVAD(threads=1)
            t0 = time.perf_counter()
            x, y = voice_pauses(voice, per_voice, vad, np.random.default_rng([seed, vi]), witness=witness)
            np.savez(path, x=x, y=y)
            log(f"{voice.label}: {len(y)} pauses ({int(y.sum())} ends) in {time.perf_counter() - t0:.0f} s")
        xs.append(x)
        ys.append(y)
        es.append(np.full(len(y), voice.engine))
    return PauseSet(np.concatenate(xs), np.concatenate(ys), np.concatenate(es))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--per-voice", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--witness", choices=("prosody", "acoustic"), default="prosody",
                    help="whose features: the prosodic ones or Whisper's encoder states (acoustic.py)")
    args = ap.parse_args(argv)
    witness = None
    if args.witness == "acoustic":
        from turn_detection.acoustic import AcousticClassifier

        witness = AcousticClassifier.extractor()
    ps = load(args.cache, args.per_voice, args.seed, witness=witness)
    for e in ENGINES:
        m = ps.engines == e
        print(f"{e:9s} {int(m.sum())} pauses, {int(ps.labels[m].sum())} ends")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
