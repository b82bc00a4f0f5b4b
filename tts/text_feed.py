"""Feeds a text to a speech stream the way an LLM writes it: small deltas at a token rate.
Used by `parley say --stream` and the TTS benchmark to measure latency from the first delta."""

from __future__ import annotations

import re
import time

from tts.stream import SpeechStream

# Like a BPE tokenizer on English (SmolLM2's: common words are one token with their leading
# space, digits one by one, punctuation apart): word pieces of <= 8 letters.
_DELTA = re.compile(r"\s?[A-Za-z]{1,8}|'[a-z]{1,2}|\s?\d|\s?[^\sA-Za-z\d]|\s+")


def llm_deltas(text: str) -> list[str]:
    """Splits `text` into LLM-like deltas; "".join(llm_deltas(t)) == t."""
    return _DELTA.findall(text)


def feed_text(stream: SpeechStream, text: str, tokens_per_s: float = 30.0) -> float:
    """Pushes `text` into `stream` at `tokens_per_s` (0: all at once), then ends the input.
    Returns the perf_counter time of the first delta. Blocks for the length of the reply."""
    if tokens_per_s < 0:
        raise ValueError("tokens_per_s must be >= 0")
    deltas = llm_deltas(text)
    t0 = time.perf_counter()
    for i, delta in enumerate(deltas):
        if tokens_per_s:
            wait = t0 + i / tokens_per_s - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
        stream.push_text(delta)
    stream.end_input()
    return t0
