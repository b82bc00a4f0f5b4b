"""Turns a stream of LLM text deltas into speakable chunks.

The first chunk goes out as early as prosody allows: at the first clause or sentence boundary,
or after `first_max_words` complete words when no boundary has come by then. Later chunks end
at sentence boundaries (longer ones cut at `max_chars`), unless the listener is about to run
out of audio: then `take_words` cuts the words buffered so far (SpeechStream's keep-up). A
boundary is only taken once the character after it has arrived ("3." may become "3.14";
"example." may become "example.com"), so chunking a token stream gives exactly the chunks of
the whole string pushed at once (when no keep-up cut came between).
Never split: inside numbers, decimals and URLs (no whitespace there), after titles and
abbreviations ("Dr. Smith", "e.g. this"), after initials ("J. Smith") or list numbers ("1.").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# never end a chunk after these (lower case, without the final dot)
_NO_SPLIT = {"dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "approx", "no",
             "fig", "mt", "ave", "dept", "est", "cf", "a.m", "p.m"}
# end a sentence only when the next word starts with a capital letter
_MAYBE_FINAL = {"etc", "inc", "ltd", "co", "corp", "u.s", "u.k"}
_SENTENCE = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s|$)|\n")
_CLAUSE = re.compile(r"[,;:—–][\"'”’)\]]*(?=\s|$)|\s[-—–](?=\s)")
# A word cut (no punctuation there) never ends a chunk on these: each leans on the next word,
# and Piper, speaking the chunk alone, swallows or drops it. Keep-up at ~5 tok/s cut "of
# Australia is" | "Canberra." and whisper-base heard "of Australia's camera"; "of Australia" |
# "is Canberra." is heard right (tests/test_tts_chunker.py).
_LEANS_ON_NEXT = frozenset((
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "with", "from", "into", "onto",
    "about", "as", "than", "and", "or", "but", "nor", "if", "is", "are", "was", "were", "am", "be",
    "been", "being", "has", "have", "had", "do", "does", "did", "will", "would", "can", "could",
    "shall", "should", "may", "might", "must", "my", "your", "his", "its", "our", "their", "i",
    "we", "they", "he", "she", "it's", "i'm", "we're", "you're", "they're", "there's", "that's",
    "what's",
))
_URL_LIKE = re.compile(r"://|www\.|\w[./]\w|@")
_WORD = re.compile(r"\S+(?=\s)")
_WAIT = -1


@dataclass(frozen=True)
class ChunkerConfig:
    # First chunk after this many words when no clause boundary came first: the latency/prosody
    # trade. At 30 tok/s (benchmarks/tts.py, Piper, 1 thread) first audio p50 was ~100 ms with
    # 2 words, 138 ms with 3, ~160 ms with 5; Piper takes ~35 ms for a 2-3 word chunk.
    first_max_words: int = 2
    max_chars: int = 300  # later chunks are cut (at a clause or word) past this length
    min_chunk_chars: int = 2  # a boundary closing fewer letters than this is skipped

    def __post_init__(self) -> None:
        if self.first_max_words < 1:
            raise ValueError("first_max_words must be >= 1")
        if self.max_chars < 20:
            raise ValueError("max_chars must be >= 20")
        if self.min_chunk_chars < 1:
            raise ValueError("min_chunk_chars must be >= 1")


class TextChunker:
    """push(delta) -> chunks ready now; flush() -> the rest at the end of the reply."""

    def __init__(self, config: ChunkerConfig | None = None) -> None:
        self.config = config or ChunkerConfig()
        self._buf = ""
        self._chunks_out = 0

    def push(self, delta: str) -> list[str]:
        if not isinstance(delta, str):
            raise TypeError(f"text delta must be a str, got {type(delta).__name__}")
        self._buf += delta
        return self._drain(final=False)

    def flush(self) -> list[str]:
        out = self._drain(final=True)
        rest = self._buf.strip()
        self._buf = ""
        if rest:
            out.append(rest)
            self._chunks_out += 1
        return out

    def reset(self) -> None:
        self._buf, self._chunks_out = "", 0

    @property
    def buffered_words(self) -> str:
        """The complete words held back, waiting for their chunk to end."""
        return " ".join(_WORD.findall(self._buf))

    def take_words(self, min_words: int = 1) -> list[str]:
        """The complete words buffered so far as one chunk now, without waiting for the sentence
        to end: at the last clause boundary among them, else after the last word that may end a
        chunk (never inside "Dr. Smith" or "March 3, 2024"); nothing when fewer than `min_words`
        words would go. For a listener about to run out of audio: a slow LLM (~20 tok/s here)
        took ~1 s to finish the sentence after a 2-word first chunk, heard as a stutter."""
        if self._chunks_out == 0:
            return []  # the first chunk has its own rule
        words = list(_WORD.finditer(self._buf))
        clauses = [m.end() for m in _CLAUSE.finditer(self._buf)
                   if self._accept(self._buf, m, final=False) is True]
        cut = None
        for i in range(len(words) - 1, min_words - 2, -1):
            if self._may_end_chunk(words, i):
                cut = words[i].end()
                break
        if cut is None:
            return []
        within = [c for c in clauses if c <= cut and len(_WORD.findall(self._buf[:c] + " ")) >= min_words]
        cut = within[-1] if within else cut
        chunk, self._buf = self._buf[:cut].strip(), self._buf[cut:]
        if not chunk:
            return []
        self._chunks_out += 1
        return [chunk]

    def _drain(self, final: bool) -> list[str]:
        out: list[str] = []
        while True:
            cut = self._find_cut(final)
            if cut is None or cut == _WAIT:
                return out
            chunk, self._buf = self._buf[:cut].strip(), self._buf[cut:]
            if chunk:
                out.append(chunk)
                self._chunks_out += 1

    def _find_cut(self, final: bool) -> int | None:
        """Index just past the next chunk, _WAIT when a boundary needs more text, None if none."""
        buf = self._buf
        first = self._chunks_out == 0
        pattern_cut = self._boundary(buf, _SENTENCE, final)
        if first:
            clause_cut = self._boundary(buf, _CLAUSE, final)
            pattern_cut = _earliest(pattern_cut, clause_cut)
            word_cut = self._word_cut(buf, self.config.first_max_words)
            return _earliest(pattern_cut, word_cut)
        if len(buf) <= self.config.max_chars or (pattern_cut not in (None, _WAIT)
                                                  and pattern_cut <= self.config.max_chars):
            return pattern_cut
        return self._long_cut(buf)

    def _boundary(self, buf: str, pattern: re.Pattern, final: bool) -> int | None:
        for m in pattern.finditer(buf):
            if len(re.sub(r"\W", "", buf[: m.start()])) < self.config.min_chunk_chars:
                continue
            verdict = self._accept(buf, m, final)
            if verdict is True:
                return m.end()
            if verdict is None:
                return _WAIT
        return None

    @staticmethod
    def _accept(buf: str, m: re.Match, final: bool) -> bool | None:
        """True: a boundary; False: not one; None: undecidable until more text arrives."""
        mark = m.group(0).strip()
        at_end = m.end() == len(buf) and not final
        word = buf[: m.start()].split()[-1] if buf[: m.start()].split() else ""
        if at_end:
            # ",;!?" after a word end a clause whatever follows (a delta saved: 33 ms at 30 tok/s);
            # "." may still become "3.14" or "example.com", ":" "7:30" or "https://"
            ok = mark[:1] in ",;!?" and word[-1:].isalpha() and not _URL_LIKE.search(word)
            return True if ok else None
        if mark == "," and m.start() > 0 and buf[m.start() - 1].isdigit():
            nxt = re.search(r"\S", buf[m.end():])  # "March 3, 2024" is one date
            if nxt is None:
                return True if final else None
            return not nxt.group(0).isdigit()
        if not mark.startswith("."):
            return True
        key = word.lower().lstrip("(\"'")
        if key in _NO_SPLIT or re.fullmatch(r"[A-Z]|\d{1,3}", word.lstrip("(\"'")):
            return False  # "Dr.", initials "J.", list numbers "1."
        if key in _MAYBE_FINAL:
            nxt = re.search(r"\S", buf[m.end():])
            if nxt is None:
                return True if final else None
            return nxt.group(0).isupper()
        return True

    def _word_cut(self, buf: str, n_words: int) -> int | None:
        words = list(_WORD.finditer(buf))
        for i in range(n_words - 1, len(words)):
            if self._may_end_chunk(words, i):
                return words[i].end()
        return None

    @staticmethod
    def _may_end_chunk(words: list[re.Match], i: int) -> bool:
        w = words[i].group(0)
        key = w.lower().rstrip(".")
        if w.endswith(".") and (key in _NO_SPLIT or re.fullmatch(r"[A-Z]", w[:-1])):
            return False  # "Dr." or "J." binds to the next word
        if key.strip("\"'(’‘").replace("’", "'") in _LEANS_ON_NEXT:
            return False  # "of Australia is" | "Canberra." is heard as "Australia's camera"
        # "March 3, 2024" (the next word may not have come yet: then wait)
        return not (re.search(r"\d,$", w) and (i + 1 >= len(words) or words[i + 1].group(0)[:1].isdigit()))

    def _long_cut(self, buf: str) -> int:
        limit = self.config.max_chars
        clause = [m.end() for m in _CLAUSE.finditer(buf[:limit])]
        if clause and clause[-1] > limit // 3:
            return clause[-1]
        ws = [m.end() for m in _WORD.finditer(buf[:limit])]
        return ws[-1] if ws else limit


def _earliest(a: int | None, b: int | None) -> int | None:
    if _WAIT in (a, b):
        return _WAIT  # an undecided boundary holds back every later candidate
    if a is None or b is None:
        return b if a is None else a
    return min(a, b)


def sentence_end(text: str) -> int | None:
    """Index just past the first sentence end in `text` that the chunker would take (the same
    rules: "3." or "Dr." is none, a final "." only once the next character came); None if none."""
    for m in _SENTENCE.finditer(text):
        if TextChunker._accept(text, m, final=False) is True:
            return m.end()
    return None


def split_text(text: str, config: ChunkerConfig | None = None) -> list[str]:
    """All chunks of a whole string (what the streaming chunker yields for it)."""
    chunker = TextChunker(config)
    return chunker.push(text) + chunker.flush()
