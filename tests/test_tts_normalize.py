"""Text normalization for speech."""

from __future__ import annotations

import pytest

from tts import normalize_text
from tts.numbers import cardinal, ordinal, year


@pytest.mark.unit
@pytest.mark.parametrize("n, words", [(0, "zero"), (13, "thirteen"), (40, "forty"), (105, "one hundred five"),
                                      (1200, "one thousand two hundred"), (-7, "minus seven"),
                                      (3_000_021, "three million twenty one")])
def test_cardinals(n, words):
    assert cardinal(n) == words


@pytest.mark.unit
@pytest.mark.parametrize("n, words", [(1, "first"), (2, "second"), (3, "third"), (12, "twelfth"),
                                      (20, "twentieth"), (21, "twenty first"), (100, "one hundredth")])
def test_ordinals(n, words):
    assert ordinal(n) == words


@pytest.mark.unit
@pytest.mark.parametrize("n, words", [(1999, "nineteen ninety nine"), (2005, "two thousand five"),
                                      (2024, "twenty twenty four"), (1900, "nineteen hundred"),
                                      (2000, "two thousand"), (1807, "eighteen oh seven")])
def test_years(n, words):
    assert year(n) == words


@pytest.mark.unit
@pytest.mark.parametrize("text, spoken", [
    ("It costs $5.20.", "It costs five dollars and twenty cents."),
    ("$1, $0.99 and €3", "one dollar, ninety nine cents and three euros"),
    ("a $3.5 million deal", "a three point five million dollars deal"),
    ("45% of 1,200", "forty five percent of one thousand two hundred"),
    ("pi is 3.14", "pi is three point one four"),
    ("at 7:30", "at seven thirty"),
    ("at 7:05 or 12:00", "at seven oh five or twelve o'clock"),
    ("at 6 pm today", "at six p m today"),
    ("Leave at 9 a.m. Then eat.", "Leave at nine a m. Then eat."),
    ("on March 3rd", "on March third"),
    ("on March 3, 2024", "on March third, twenty twenty four"),
    ("due 2024-06-15", "due June fifteenth, twenty twenty four"),
    ("born in 1999", "born in nineteen ninety nine"),
    ("the 21st time", "the twenty first time"),
    ("Dr. Smith and Mr. Lee", "Doctor Smith and Mister Lee"),
    ("cats, e.g. lions", "cats, for example lions"),
    ("pens, etc.", "pens, et cetera."),
    ("5-10 km", "five to ten kilometers"),
    ("salt & pepper", "salt and pepper"),
    ("No. 5", "number five"),
    ("-4 degrees", "minus four degrees"),
])
def test_numbers_times_dates_currency_abbreviations(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.unit
@pytest.mark.parametrize("text, spoken", [
    ("**Bold** and *italic* and `code`", "Bold and italic and code"),
    ("# Title\n- one\n- two", "Title one two"),
    ("See [the docs](https://x.org/a).", "See the docs."),
    ("Great job 🎉👍!", "Great job!"),
    ("Visit https://www.example.com/docs.", "Visit example dot com slash docs."),
    ("mail bob@example.org", "mail bob at example dot org"),
])
def test_markdown_emoji_and_urls(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.unit
def test_normalization_is_idempotent_and_rejects_non_text():
    once = normalize_text("Dr. Smith paid $5.20 at 7:30 p.m. on 3/15/2024, i.e. 45% off.")
    assert normalize_text(once) == once
    assert not any(ch.isdigit() for ch in once)
    with pytest.raises(TypeError):
        normalize_text(5)
