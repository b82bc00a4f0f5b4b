"""The text chunker: streamed deltas give the chunks of the whole string, early first chunk,
no split inside numbers, abbreviations or URLs."""

from __future__ import annotations

import re

import pytest

from tts import ChunkerConfig, TextChunker, normalize_text, split_text
from tts.text_feed import llm_deltas

REPLY = ("Sure, I can help with that. Dr. Smith said pi is about 3.14, e.g. a bit more than three. "
         "The fee is $5.20 per visit, i.e. cheap. See https://www.example.com/docs/v2.1?id=7 for details. "
         "Call at 7:30 p.m. Thanks!")


def _tokens(text: str) -> list[str]:
    # LLM-like deltas, in pieces of at most 3 letters (finer than llm_deltas: more cut points)
    return [p for d in llm_deltas(text) for p in re.findall(r"\s?.{1,3}", d, flags=re.S)]


def _stream(text: str, config: ChunkerConfig | None = None) -> tuple[list[str], list[int]]:
    chunker, chunks, at = TextChunker(config), [], []
    for i, tok in enumerate(_tokens(text)):
        new = chunker.push(tok)
        chunks += new
        at += [i] * len(new)
    chunks += chunker.flush()
    return chunks, at


@pytest.mark.unit
def test_deltas_reassemble_the_text():
    assert "".join(_tokens(REPLY)) == REPLY == "".join(llm_deltas(REPLY))


@pytest.mark.unit
@pytest.mark.parametrize("text", [REPLY, "Hello there", "One. Two! Three? Four", "  lead, spaces ",
                                  "A very long first clause with many words before any punctuation at all."])
def test_token_stream_gives_the_chunks_and_spoken_text_of_the_whole_string(text):
    chunks, _ = _stream(text)
    assert chunks == split_text(text)
    assert " ".join(normalize_text(c) for c in chunks) == normalize_text(text)
    assert " ".join(chunks).split() == text.split()


@pytest.mark.unit
def test_first_chunk_is_the_first_clause_and_comes_as_its_boundary_arrives():
    chunks, at = _stream(REPLY)
    assert chunks[0] == "Sure,"
    # emitted on the comma's own delta: after a word, it cannot become "3,000"
    assert at[0] == _tokens(REPLY).index(",")
    assert chunks[1] == "I can help with that."


@pytest.mark.unit
def test_first_chunk_without_a_clause_boundary_comes_after_a_few_words():
    chunks = split_text("The weather today looks sunny and warm with a light breeze. Enjoy it.",
                        ChunkerConfig(first_max_words=4))
    assert chunks[0] == "The weather today looks"
    assert split_text("Your flight leaves soon.")[0] == "Your flight"  # default: 2 words
    assert chunks[1:] == ["sunny and warm with a light breeze.", "Enjoy it."]


@pytest.mark.unit
def test_later_chunks_end_at_sentences_not_clauses():
    chunks = split_text("Yes, first. Then a, b, and c. Done.")
    assert chunks == ["Yes,", "first.", "Then a, b, and c.", "Done."]


@pytest.mark.unit
@pytest.mark.parametrize("keep", ["3.14", "Dr. Smith", "e.g. a bit", "https://www.example.com/docs/v2.1?id=7",
                                  "$5.20", "7:30 p.m.", "i.e. cheap"])
def test_never_splits_inside_numbers_abbreviations_or_urls(keep):
    chunks, _ = _stream(REPLY)
    assert any(keep in c for c in chunks), chunks


@pytest.mark.unit
@pytest.mark.parametrize("text, first", [  # with 3 words
    ("Dr. Smith is in room four today now.", "Dr. Smith is in room"),
    ("We sold 3,000 units, a record.", "We sold 3,000"),
    ("On March 3, 2024 we met.", "On March 3, 2024"),
    ("Meet J. Smith at noon.", "Meet J. Smith"),
])
def test_first_chunk_word_rule_keeps_bound_words_together(text, first):
    assert split_text(text, ChunkerConfig(first_max_words=3))[0] == first


@pytest.mark.unit
def test_list_numbers_and_initials_do_not_end_chunks():
    assert split_text("Steps: first. Then 1. open and 2. close. J. R. Smith wrote it.") == [
        "Steps:", "first.", "Then 1. open and 2. close.", "J. R. Smith wrote it."]


@pytest.mark.unit
def test_etc_ends_a_sentence_only_before_a_capital():
    assert split_text("Hi. Bring pens, paper, etc. and tea. Bring cups etc. We start.") == [
        "Hi.", "Bring pens, paper, etc. and tea.", "Bring cups etc.", "We start."]


@pytest.mark.unit
def test_undecided_boundary_waits_for_the_next_character():
    c = TextChunker()
    assert c.push("Hello there.") == []  # could still be "there.com"
    assert c.push(" How") == ["Hello there."]
    assert c.flush() == ["How"]


@pytest.mark.unit
def test_long_sentence_is_cut_at_max_chars():
    text = "Okay. " + " ".join(["word"] * 200) + "."
    chunks = split_text(text, ChunkerConfig(max_chars=100))
    assert all(len(c) <= 100 for c in chunks)
    assert " ".join(chunks).split() == text.split()


@pytest.mark.unit
def test_empty_and_whitespace_give_no_chunks():
    assert split_text("") == []
    assert split_text("   \n\t ") == []


@pytest.mark.unit
def test_bad_input_and_config_raise():
    with pytest.raises(TypeError):
        TextChunker().push(None)
    with pytest.raises(ValueError):
        ChunkerConfig(first_max_words=0)


def _after_first_chunk(text: str) -> TextChunker:
    chunker = TextChunker(ChunkerConfig(first_max_words=1))
    assert chunker.push("Well, ") == ["Well,"]
    assert chunker.push(text) == []
    return chunker


@pytest.mark.unit
def test_take_words_cuts_the_buffered_words_for_a_listener_about_to_run_dry():
    assert TextChunker().take_words() == []  # the first chunk keeps its own rule
    chunker = _after_first_chunk("you're excited about the up")
    assert chunker.take_words(2) == ["you're excited"]  # "about the" lean on "up", which may become "upcoming"
    assert chunker.push("coming event! It") == ["about the upcoming event!"]
    assert chunker.take_words(2) == []  # one word is fewer than asked for


@pytest.mark.unit
def test_take_words_prefers_a_clause_boundary_and_never_splits_titles_or_dates():
    assert _after_first_chunk("and then, we could go ").take_words(2) == ["and then,"]
    assert _after_first_chunk("you should see Dr. ").take_words(1) == ["you should see"]
    assert _after_first_chunk("it opened on March 3, ").take_words(1) == ["it opened on March"]
    chunker = _after_first_chunk("on March 3, 2024 we")
    assert chunker.take_words(1) == ["on March 3, 2024"]
    assert chunker.flush() == ["we"]


@pytest.mark.unit
@pytest.mark.parametrize("text, first", [
    ("of Australia is Canberra.", "of Australia"),  # "of Australia is" | "Canberra." was heard "Australia's camera"
    ("I would be happy to book a table", "I would be happy to book"),
    ("going to the store", "going"),
    ("we could meet at the ", "we could meet"),
    ("and then we’re ", "and then"),  # a curly apostrophe, as LLMs write it
])
def test_a_keep_up_cut_never_ends_on_a_word_that_leans_on_the_next(text, first):
    assert _after_first_chunk(text).take_words(1) == [first]


@pytest.mark.unit
def test_the_first_chunk_word_rule_runs_past_words_that_lean_on_the_next():
    assert split_text("What is the capital of France?", ChunkerConfig(first_max_words=2))[0] == "What is the capital"
    assert split_text("He is here, I think.", ChunkerConfig(first_max_words=1))[0] == "He is here,"
    assert split_text("Paris is lovely in spring.", ChunkerConfig(first_max_words=1))[0] == "Paris"


@pytest.mark.unit
def test_sentence_end_is_decided_by_the_chunkers_rules():
    from tts import sentence_end

    assert sentence_end("upcoming event. It") == len("upcoming event.")
    assert sentence_end("Have fun!") == len("Have fun!")
    assert sentence_end("upcoming event.") is None  # may still become "event.com"
    assert sentence_end("it costs 3.") is None and sentence_end("it costs 3.5 now") is None
    assert sentence_end("ask Dr. Smith. Then") == len("ask Dr. Smith.")
