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
    attached: bool = False  # continues the previous word with no space between ("$5" + ".20")

    @property
    def norm(self) -> str:
        """Lower case without punctuation: what LocalAgreement compares."""
        return _PUNCT.sub("", self.text.lower())

    def shifted(self, dt: float) -> Word:
        return Word(self.text, self.start + dt, self.end + dt, self.probability, self.attached)


def append_word(words: list[Word], raw: str, start: float, end: float, probability: float) -> None:
    """Add one of Whisper's aligned words. A lone punctuation mark continues the word before it.
    Whisper splits "$5.20" into " $5" + ".20": a piece without a leading space stays its own
    word (LocalAgreement compares pieces, and a later decode may split differently) but is
    marked `attached`, so the text reads "$5.20", not "$5 .20"."""
    text = raw.strip()
    if not text:
        return
    word = Word(text, start, end, probability, attached=bool(words) and not raw.startswith(" "))
    if words and not word.norm:
        p = words.pop()
        word = Word(p.text + text, p.start, max(p.end, end), min(p.probability, probability), p.attached)
    words.append(word)


def join_words(words: tuple[Word, ...] | list[Word]) -> str:
    return "".join(w.text if w.attached or i == 0 else " " + w.text for i, w in enumerate(words)).strip()


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
