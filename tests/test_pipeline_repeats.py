"""The repeat guard: a reply that says a sentence again ends there; others are not delayed."""

from __future__ import annotations

import re

import pytest

from pipeline.repeats import RepeatGuard

LOOP = ("The capital of Australia is Canberra. I'm actually planning to visit there sometime soon. "
        "I'm really looking forward to it. I'm actually planning to visit there sometime soon. "
        "I'm actually planning to visit")


def _deltas(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)  # word-sized deltas, as a tokenizer streams them


def _run(text: str) -> tuple[list[tuple[str, str]], bool, str]:
    g, out, ended = RepeatGuard(), [], False
    for d in _deltas(text):
        sent, ended = g.push(d)
        out.append((d, sent))
        if ended:
            return out, True, ""
    return out, False, g.finish()


@pytest.mark.unit
def test_a_looping_reply_ends_before_its_first_repeat():
    out, ended, _ = _run(LOOP)
    assert ended
    said = "".join(s for _, s in out)
    assert said == ("The capital of Australia is Canberra. I'm actually planning to visit there sometime soon. "
                    "I'm really looking forward to it. ")


@pytest.mark.unit
def test_a_reply_without_repeats_is_sent_as_it_streams():
    text = "Sure. It will be sunny in Chicago on Saturday, 3.5 degrees warmer. Have a great weekend!"
    out, ended, rest = _run(text)
    assert not ended and rest == ""
    # no sentence starts like an earlier one: every delta goes out the moment it comes in
    assert all(d == s for d, s in out)


@pytest.mark.unit
def test_a_sentence_that_only_starts_like_an_earlier_one_is_held_then_sent_whole():
    text = "It is sunny. It is raining in Paris. Bye."
    out, ended, rest = _run(text)
    assert not ended and rest == ""
    assert "".join(s for _, s in out) == text
    held = [d for d, s in out if s == ""]
    assert held == ["It ", "is "]  # held while it could be "It is sunny." again, then released


@pytest.mark.unit
def test_the_held_end_of_a_reply_is_dropped_only_when_it_repeats():
    g = RepeatGuard()
    assert g.push("Okay, done. Okay, ") == ("Okay, done.", False)
    assert g.finish() == ""  # "Okay," cut at the limit: the start of "Okay, done." again
    g = RepeatGuard()
    assert g.push("Okay, done. Okay, ") == ("Okay, done.", False)
    assert g.push("bye") == (" Okay, bye", False)
    assert g.finish() == ""
    g = RepeatGuard()
    g.push("Hello there. Hello there.")  # the final "." is decided only by the next character
    assert g.finish() == "" and g.repeats == 1
