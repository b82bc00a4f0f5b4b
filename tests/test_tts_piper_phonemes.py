"""Piper's phonemes through our espeak-ng call: the same as piper's own, without its leak; long
sentences in pieces the arena is sized for."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from piper.voice import PiperVoice

from pipeline.allocator import heap_in_use_mb
from tests.speech import _piper
from tts.piper_phonemes import EspeakClauses, ParleyPiperVoice, split_sentence

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
    assert isinstance(voice, ParleyPiperVoice) and isinstance(voice.clauses, EspeakClauses)


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
    # assertion says so, and EspeakClauses can go.
    voice = _piper()._voice
    ours = _growth(voice.phonemize)
    piper_own = _growth(lambda t: PiperVoice.phonemize(voice, t))
    assert ours < 5_000, ours
    assert piper_own > 200 * 300, f"piper's bridge no longer leaks ({piper_own} bytes after 200 calls)"


def test_phonemizing_texts_of_new_lengths_leaves_no_cyclic_garbage():
    # a string buffer per call defined a c_char array class per new length: cyclic garbage
    # that waits for a full collection (~3 a turn in a real session)
    clauses = _piper()._voice.clauses
    clauses.set_voice("en-us")
    gc.collect()
    for n in range(1, 21):
        got = clauses("word " * n + "end.")
        assert got and got[-1][2], got  # read to the sentence's end
    assert gc.collect() == 0


def _native_growth_mb(call, calls: int = 1000) -> float:
    """Heap malloc has handed out and not had back after `calls` calls (espeak-ng's own
    allocations, which tracemalloc does not see), in MiB."""
    call()
    gc.collect()
    before = heap_in_use_mb()
    for _ in range(calls):
        call()
    gc.collect()
    return heap_in_use_mb() - before


def test_reading_text_after_text_keeps_no_espeak_voice_behind():
    # espeak-ng leaks ~1.5 KB inside every espeak_SetVoiceByName, and piper sets the voice before
    # every text: 1000 texts held ~1.5 MB for the process's life. If espeak-ng stops leaking, the
    # second assertion says so, and EspeakClauses.set_voice can set it every time again.
    voice = _piper()._voice
    if heap_in_use_mb() is None:
        pytest.fail("no heap statistics from this allocator (glibc's mallinfo2 or jemalloc expected)")
    ours = _native_growth_mb(lambda: voice.phonemize("Hello there, how are you today?"))
    assert ours < 0.3, f"{ours:.2f} MB held after 1000 texts"
    raw = _native_growth_mb(lambda: voice.clauses._set_voice(voice.config.espeak_voice))
    assert raw > 0.8, f"espeak-ng's set voice no longer leaks ({raw:.2f} MB after 1000 calls)"


def test_the_voice_is_set_again_after_another_one_was():
    voice = _piper()._voice
    text = "What is the capital of Australia?"
    english = voice.phonemize(text)
    voice.clauses._set_voice("de")  # e.g. another voice object, or piper's own path
    assert voice.phonemize(text) == english == PiperVoice.phonemize(voice, text)
    assert voice.clauses._current_voice()[1].endswith(voice.config.espeak_voice.encode())


def test_a_long_sentence_is_cut_at_a_clause_or_word_into_pieces_that_fit():
    words = [list(w) for w in ("aa", "bbb", "c,", "dddd", "ee", "f", "gggggg")]
    phonemes = [p for w in words for p in [*w, " "]][:-1]  # aa bbb c, dddd ee f gggggg
    pieces = split_sentence(phonemes, 12)
    assert all(len(p) <= 12 for p in pieces[:-1]) and [p for piece in pieces for p in [*piece, " "]][:-1] == phonemes
    assert "".join(pieces[0]) == "aa bbb c,"  # the clause mark, not the last word that fits
    assert "".join(pieces[1]) == "dddd ee f"
    assert split_sentence(list("x" * 30), 12) == [list("x" * 30)]  # nowhere to cut: whole
    assert split_sentence(phonemes, 100) == [phonemes]


def test_the_voice_reads_a_long_sentence_in_pieces_of_its_bound():
    voice = _piper()._voice
    text = " ".join(["the weather today is sunny and warm with a light breeze"] * 6) + "."
    pieces = voice.phonemize(text)
    assert len(pieces) > 1 and max(len(p) for p in pieces) <= voice.max_phonemes
    assert [p for piece in pieces for p in [*piece, " "]][:-1] == PiperVoice.phonemize(voice, text)[0]
