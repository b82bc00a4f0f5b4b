"""Cheap text cues from the interim transcript: a turn that ends on a conjunction,
preposition, article or filler is almost never finished."""

from __future__ import annotations

import re

UNFINISHED_ENDINGS = frozenset(
    ["and", "or", "but", "so", "because", "if", "when", "while", "that", "which", "who", "the", "a", "an", "to", "of", "for", "with", "from", "in", "on", "at", "by", "about", "into", "than", "as", "my", "your", "our", "their", "his", "her", "its", "this", "these", "those", "is", "are", "was", "were", "will", "would", "could", "should", "can", "um", "uh", "like", "i", "we", "you", "they"]
)
_WORD = re.compile(r"[a-z']+")


def text_unfinished(text: str) -> bool:
    """True when the transcript's last word marks an unfinished sentence."""
    words = _WORD.findall(text.lower())
    return bool(words) and words[-1] in UNFINISHED_ENDINGS
