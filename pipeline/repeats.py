"""A reply that says a sentence again ends there.

The 135M voice model, greedy with a repetition penalty of 1.1, still loops: in one benchmark
reply it said "I'm actually planning to visit there sometime soon." five times, ran to the
token limit, and played for over 30 s. The guard reads the reply's text as it streams; text
that could be the start of a sentence already said is held until it is known; a finished
repeat is dropped and ends the reply (the engine request is aborted); text that turns out
different goes on at once, so a reply that does not repeat itself is never delayed."""

from __future__ import annotations

import re

from tts.chunker import sentence_end

_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.lower().replace("\u2019", "'")))


class RepeatGuard:
    def __init__(self) -> None:
        self.said: set[tuple[str, ...]] = set()  # the reply's finished sentences, as words
        self.sentence = ""  # the sentence in progress: sent text, then the held `pending`
        self.pending = ""
        self.repeats = 0

    def push(self, text: str) -> tuple[str, bool]:
        """(text to send now, whether the reply ends here: it said a sentence again)."""
        self.sentence += text
        self.pending += text
        out = ""
        while (cut := sentence_end(self.sentence)) is not None:
            done, rest = self.sentence[:cut], self.sentence[cut:]
            key = _words(done)
            if key and key in self.said:  # the repeat and whatever followed it are dropped
                self.repeats += 1
                self.sentence = self.pending = ""
                return out, True
            if key:
                self.said.add(key)
            k = len(self.pending) - len(rest)  # the held part of the finished sentence
            out, self.pending, self.sentence = out + self.pending[:k], self.pending[k:], rest
        if not self._could_repeat(self.sentence):
            out, self.pending = out + self.pending, ""
        return out, False

    def finish(self) -> str:
        """The held text at the reply's end: dropped when it repeats (or begins to repeat) a
        sentence already said (a loop cut at the token limit), else sent."""
        held, could = self.pending, self._could_repeat(self.sentence)
        self.sentence = self.pending = ""
        if could:
            self.repeats += 1
            return ""
        return held

    def _could_repeat(self, partial: str) -> bool:
        """Whether `partial` (a sentence so far) is the start of a sentence already said; its
        last word may still be growing unless the text ends in a space or punctuation."""
        words = _words(partial)
        if not words:
            return False
        growing = partial[-1:].isalnum() or partial[-1:] == "'"
        whole, last = (words[:-1], words[-1]) if growing else (words, None)
        for s in self.said:
            if len(s) < len(words) or s[: len(whole)] != whole:
                continue
            if last is None or s[len(whole)].startswith(last):
                return True
        return False
