"""The voice benchmark's dataset: a directory is one conversation, its clips in name order.

Same format as `parley bench turn` (benchmarks/turn.py): DIR/NAME.wav (16 kHz mono) +
DIR/NAME.json {"text", "kind", "speech", "pauses", "turn_end"}. Unlike that benchmark, a bad
entry does not stop the run: a conversation of five turns with one broken file still measures
four. Each problem is reported by name and the entry is skipped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE
from parley.errors import AudioFormatError, ParleyError
from parley.wav import read_wav

REQUIRED_KEYS = ("text", "kind", "speech", "pauses", "turn_end")


class DatasetError(ParleyError, ValueError):
    """A dataset directory with no usable clip at all."""


@dataclass(frozen=True)
class VoiceClip:
    name: str
    audio: np.ndarray  # [N] float32 at 16 kHz
    text: str  # what the user says: a reply must answer all of it
    kind: str  # "complete" | "paused"
    turn_end: float  # seconds: the end of the user's last word
    pauses: tuple[tuple[float, float], ...]  # mid-turn silences (start, end) in seconds

    @property
    def duration_s(self) -> float:
        return len(self.audio) / ENGINE_RATE


def _load_one(meta_path: Path) -> VoiceClip:
    """Raises ValueError / AudioFormatError with the reason an entry cannot be used."""
    wav_path = meta_path.with_suffix(".wav")
    if not wav_path.exists():
        raise ValueError("no WAV beside the JSON")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"unreadable JSON ({e})") from e
    if not isinstance(meta, dict) or any(k not in meta for k in REQUIRED_KEYS):
        raise ValueError(f"JSON must hold {', '.join(REQUIRED_KEYS)}")
    audio, sr = read_wav(wav_path)
    if sr != ENGINE_RATE or audio.ndim != 1:
        raise AudioFormatError(f"need 16 kHz mono, got {sr} Hz shape {audio.shape}")
    try:
        turn_end = float(meta["turn_end"])
        pauses = tuple((float(a), float(b)) for a, b in meta["pauses"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"turn_end / pauses are not numbers ({e})") from e
    duration = len(audio) / ENGINE_RATE
    if not 0.0 < turn_end <= duration:
        raise ValueError(f"turn_end {turn_end:.3f} s is outside the clip (0-{duration:.3f} s)")
    if not isinstance(meta["text"], str) or not meta["text"].strip():
        raise ValueError("text is empty")
    return VoiceClip(meta_path.stem, audio, meta["text"], str(meta["kind"]), turn_end, pauses)


def load_conversation(directory: str | Path) -> tuple[list[VoiceClip], list[dict]]:
    """-> (clips in name order, skipped entries [{"name", "reason"}]). A WAV without its JSON
    is skipped too. Raises DatasetError when nothing usable is left."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetError(f"{directory}: not a directory")
    names = sorted({p.stem for p in directory.iterdir() if p.suffix in (".wav", ".json")})
    clips, skipped = [], []
    for name in names:
        meta_path = directory / f"{name}.json"
        if not meta_path.exists():
            skipped.append({"name": name, "reason": "no JSON labels beside the WAV"})
            continue
        try:
            clips.append(_load_one(meta_path))
        except ValueError as e:  # AudioFormatError is a ValueError too
            skipped.append({"name": name, "reason": str(e)})
    if not clips:
        raise DatasetError(f"no usable NAME.wav + NAME.json clip in {directory} (skipped: {skipped})")
    return clips, skipped
