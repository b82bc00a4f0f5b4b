"""What the transcriber returns: words with times, events, whole transcripts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

EVENT_KINDS = ("interim", "preflight", "final")
_PUNCT = re.compile(r"[^\w']+")


@dataclass(frozen=True)
class Word:
    text: str  # as Whisper wrote it, without the leading space
    start: float  # seconds (stream time for events, file time for transcripts)
    end: float
    probability: float = 1.0

    @property
    def norm(self) -> str:
        """Lower case without punctuation: what LocalAgreement compares."""
        return _PUNCT.sub("", self.text.lower())

    def shifted(self, dt: float) -> Word:
        return Word(self.text, self.start + dt, self.end + dt, self.probability)


def join_words(words: tuple[Word, ...] | list[Word]) -> str:
    return " ".join(w.text for w in words).strip()


@dataclass(frozen=True)
class TranscriptEvent:
    kind: str  # "interim" | "preflight" | "final"
    text: str  # stable_text + the unstable tail (final: everything)
    stable_text: str  # never shrinks within a turn; text starts with it
    words: tuple[Word, ...] = ()
    audio_time_s: float = 0.0  # stream time of the newest audio this event covers
    latency_s: float = 0.0  # wall clock: newest covered audio pushed (final: flush called) -> event
    decode_s: float = 0.0  # model time spent on this event (0 when no decode was needed)
    turn: int = 0

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"kind must be one of {EVENT_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Transcript:
    text: str
    words: tuple[Word, ...] = ()
    duration_s: float = 0.0
    decode_s: float = 0.0
    model: str = ""
    language: str = "en"
    extra: dict = field(default_factory=dict, compare=False)
