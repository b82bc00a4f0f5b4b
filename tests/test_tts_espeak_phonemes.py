"""Piper's phonemes through our espeak-ng call: the same as piper's own, without its leak."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from piper.voice import PiperVoice

from tests.speech import _piper
from tts.espeak_phonemes import EspeakClauses, LeakFreePiperVoice

pytestmark = pytest.mark.unit

TEXTS = [
    "Hello, world!", "What is the capital of Australia?", "It's 30% off: buy now; pay later.",
    "Dr. Smith lives on St. James St. He's 42.", "Café naïve résumé — déjà vu…", "", "   ",
    "no punctuation at all", "One. Two? Three! Four, five: six; seven",
    'I said "hi" (quietly) and left...', "Bonjour (en français), mes amis.", "a\x00b",
    "Say [[ h ə l ˈoʊ ]] twice, please.",
]


def _growth(phonemize, calls: int = 200) -> int:
    """Bytes still held after `calls` phonemizations of a three-clause text (tracemalloc)."""
    text = "Hello there, how are you today? I am fine."
    phonemize(text)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(calls):
            phonemize(text)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(d.size_diff for d in after.compare_to(before, "filename"))


def test_the_embedded_voice_phonemizes_through_our_call():
    voice = _piper()._voice
    assert isinstance(voice, LeakFreePiperVoice) and isinstance(voice.clauses, EspeakClauses)


@pytest.mark.parametrize("text", TEXTS)
def test_phonemes_are_piper_own(text):
    voice = _piper()._voice
    assert voice.phonemize(text) == PiperVoice.phonemize(voice, text.replace("\x00", " "))


def test_clauses_carry_their_punctuation_and_sentence_ends():
    clauses = _piper()._voice.clauses
    clauses.set_voice("en-us")
    got = [(terminator, end) for _, terminator, end in clauses("One, two: three; four? Five! Six.")]
    assert got == [(",", False), (":", False), (";", False), ("?", True), ("!", True), (".", True)]


def test_phonemizing_keeps_nothing_per_clause():
    # piper-tts 1.8's bridge keeps every clause's tuple and phoneme string: ~490 bytes for this
    # three-clause text, every call, for the process's life. If piper stops leaking, the second
    # assertion says so, and tts/espeak_phonemes.py can go.
    voice = _piper()._voice
    ours = _growth(voice.phonemize)
    piper_own = _growth(lambda t: PiperVoice.phonemize(voice, t))
    assert ours < 5_000, ours
    assert piper_own > 200 * 300, f"piper's bridge no longer leaks ({piper_own} bytes after 200 calls)"
