"""Self-generated end-of-turn data: synthesized sentences (Piper, espeak-ng voices at
several rates), complete and cut mid-sentence at a word boundary of the SAME audio, so the
cut keeps its natural non-final prosody. Voices and sentences are split three ways:
train (fit), validation (model and policy choice), test (final report only)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from parley.audio import ENGINE_RATE, resample
from turn_detection.training import sentences


@dataclass(frozen=True)
class Voice:
    engine: str  # "piper" | "espeak" | "flite" | "festival"
    name: str  # espeak / flite / festival voice, or "joe" for the embedded Piper voice
    rate: float  # Piper length_scale, espeak words per minute; 1 for flite and festival

    @property
    def label(self) -> str:
        return f"{self.engine}-{self.name}-{self.rate:g}".replace("+", "_")


TRAIN_VOICES: tuple[Voice, ...] = (
    Voice("piper", "joe", 0.8), Voice("piper", "joe", 0.9), Voice("piper", "joe", 1.1), Voice("piper", "joe", 1.4),
    Voice("espeak", "en-us", 150), Voice("espeak", "en-us", 200), Voice("espeak", "en-gb", 170),
    Voice("espeak", "en-us+m3", 170), Voice("espeak", "en-gb-x-rp", 160), Voice("espeak", "en-us+f2", 180),
    Voice("espeak", "en-gb-x-gbclan", 165), Voice("espeak", "en-us-nyc", 175), Voice("espeak", "en-us+m1", 145),
    Voice("espeak", "en-gb+f4", 190),
    # added for the third model card: more rates, and espeak variants (pitch, formants, voicing)
    Voice("piper", "joe", 0.75), Voice("piper", "joe", 1.3),
    Voice("espeak", "en-us+m4", 155), Voice("espeak", "en+m6", 175), Voice("espeak", "en-us+klatt", 165),
    Voice("espeak", "en-gb-x-rp+f5", 170), Voice("espeak", "en-us-nyc+Annie", 185),
    Voice("espeak", "en-gb-x-gbclan+david", 160), Voice("espeak", "en-us+Alicia", 195),
    Voice("espeak", "en+john", 150),
)
# Piper ships one speaker (joe): its splits differ by speaking rate only (see MODEL_CARD.md)
VALIDATION_VOICES: tuple[Voice, ...] = (
    Voice("piper", "joe", 0.95), Voice("piper", "joe", 1.2),
    Voice("espeak", "en-gb-x-gbcwmd", 170), Voice("espeak", "en-us+m2", 160), Voice("espeak", "en-us+f1", 185),
    Voice("piper", "joe", 0.85), Voice("piper", "joe", 1.15),
    Voice("espeak", "en-us+m5", 175), Voice("espeak", "en-gb-x-gbcwmd+f4", 160), Voice("espeak", "en-gb-x-rp+m8", 165),
    Voice("espeak", "en-us-nyc+paul", 150), Voice("espeak", "en+Mike", 190),
)
TEST_VOICES: tuple[Voice, ...] = (
    Voice("piper", "joe", 1.0), Voice("piper", "joe", 1.25),
    Voice("espeak", "en-us+f3", 165), Voice("espeak", "en-gb-scotland", 175), Voice("espeak", "en-029", 185),
)
SPLITS = ("train", "validation", "test")


def split(name: str) -> tuple[tuple[str, ...], tuple[Voice, ...]]:
    """-> (sentences, voices) of "train", "validation" or "test" (disjoint in both)."""
    table = {"train": (sentences.TRAIN, TRAIN_VOICES), "validation": (sentences.VALIDATION, VALIDATION_VOICES),
             "test": (sentences.TEST, TEST_VOICES)}
    if name not in table:
        raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
    return table[name]


@functools.lru_cache(maxsize=1)
def _piper():
    from tts.piper_voice import PiperVoiceModel

    return PiperVoiceModel.default()


def synthesize(voice: Voice, text: str) -> np.ndarray:
    """[N] float32 at 16 kHz, leading/trailing silence trimmed."""
    if voice.engine == "piper":
        from tts.piper_voice import PiperOptions

        v = _piper()
        audio = resample(v.synthesize(text, PiperOptions(length_scale=voice.rate, noise_scale=0.0,
                                                         noise_w_scale=0.0)), v.sample_rate, ENGINE_RATE)
    elif voice.engine in ("flite", "festival"):
        audio = _debian_tts(voice, text)
    else:
        from tts import EspeakSynthesizer

        out = EspeakSynthesizer(voice.name, int(voice.rate)).synthesize(text, normalize=False)
        audio = resample(out.audio, out.sample_rate, ENGINE_RATE)
    iv = speech_intervals(audio)
    return audio[int(iv[0][0] * ENGINE_RATE) : int(iv[-1][1] * ENGINE_RATE)] if iv else audio


def _debian_tts(voice: Voice, text: str) -> np.ndarray:
    """Debian's flite (`flite -voice NAME`) or festival (`text2wave`, voice NAME) -> 16 kHz."""
    import subprocess
    import tempfile
    from pathlib import Path

    from parley.wav import read_wav

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.wav"
        if voice.engine == "flite":
            cmd, stdin = ["flite", "-voice", voice.name, "-t", text, "-o", str(out)], None
        else:
            cmd, stdin = ["text2wave", "-eval", f"(voice_{voice.name})", "-o", str(out)], text
        try:
            subprocess.run(cmd, input=stdin, text=True, check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise RuntimeError(f"{voice.engine} failed for voice {voice.name}: {e}") from e
        audio, sr = read_wav(out)
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    return resample(audio.astype(np.float32), sr, ENGINE_RATE)


def _envelope_db(audio: np.ndarray, hop: int = 160) -> np.ndarray:
    n = len(audio) // hop
    e = (audio[: n * hop].reshape(n, hop) ** 2).mean(axis=1)  # [n] 10 ms frames
    return 10 * np.log10(e + 1e-10)


def speech_intervals(audio: np.ndarray, gap_s: float = 0.15) -> list[tuple[float, float]]:
    """Clean synthesized audio -> [(start_s, end_s)] where the 10 ms energy is within 45 dB
    of the peak; gaps shorter than gap_s are bridged."""
    db = _envelope_db(audio)
    if len(db) == 0:
        return []
    on = np.flatnonzero(db > db.max() - 45.0)
    if len(on) == 0:
        return []
    out, start, prev = [], on[0], on[0]
    for i in on[1:]:
        if (i - prev) * 0.01 > gap_s:
            out.append((start * 0.01, (prev + 1) * 0.01))
            start = i
        prev = i
    out.append((start * 0.01, (prev + 1) * 0.01))
    return out


def find_cut(audio: np.ndarray, rng: np.random.Generator) -> int:
    """Sample index of a word boundary between 25% and 80% of the utterance: a random one of
    the energy dips (>= 20 ms at 25 dB below the speech median), else the deepest point."""
    db = _envelope_db(audio)
    lo, hi = int(0.25 * len(db)), int(0.8 * len(db))
    med = float(np.median(db[db > db.max() - 45.0]))
    low = db[lo:hi] < med - 25.0
    starts = [lo + i for i in range(1, len(low) - 1) if low[i] and low[i + 1] and not low[i - 1]]
    if starts:
        return int(rng.choice(starts)) * 160
    return (lo + int(np.argmin(db[lo:hi]))) * 160
