import pytest

from stt.events import Word, append_word, join_words

pytestmark = pytest.mark.unit


def build(pieces):
    words: list[Word] = []
    for i, raw in enumerate(pieces):
        append_word(words, raw, i * 0.1, i * 0.1 + 0.1, 0.9)
    return words


def test_pieces_without_a_leading_space_join_without_one():
    words = build([" The", " total", " is", " $5", ".20", ",", " including", " tax", "."])
    assert join_words(words) == "The total is $5.20, including tax."
    assert [w.text for w in words][3:5] == ["$5", ".20,"]  # pieces kept for LocalAgreement
    assert words[4].attached and not words[3].attached


def test_lone_punctuation_merges_into_the_previous_word():
    words = build([" Hello", ",", " world", "!"])
    assert [w.text for w in words] == ["Hello,", "world!"]
    assert join_words(words) == "Hello, world!"


def test_first_piece_is_never_attached_and_shift_keeps_the_flag():
    words = build(["Okay", " fine", "'s"])
    assert not words[0].attached
    assert join_words([w.shifted(1.0) for w in words]) == "Okay fine's"
