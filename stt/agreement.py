"""LocalAgreement-2 (as in whisper_streaming): a word is stable once two consecutive decodes of
the growing buffer agree on it. Times are in the utterance buffer's clock (seconds)."""

from __future__ import annotations

from stt.events import Word

_OVERLAP_S = 0.1  # words starting this much before the stable end are re-recognitions
_MAX_NGRAM = 5


class HypothesisBuffer:
    def __init__(self) -> None:
        self.committed: list[Word] = []
        self.tail: list[Word] = []  # the last decode's words after the stable prefix
        self.stable_end = 0.0

    def _new_part(self, words: list[Word]) -> list[Word]:
        new = [w for w in words if w.start > self.stable_end - _OVERLAP_S]
        if new and self.committed and abs(new[0].start - self.stable_end) < 1.0:
            # drop the head of `new` that repeats the end of the stable words
            for n in range(min(len(self.committed), len(new), _MAX_NGRAM), 0, -1):
                if [w.norm for w in self.committed[-n:]] == [w.norm for w in new[:n]]:
                    return new[n:]
        return new

    def insert(self, words: list[Word], horizon: float = float("inf")) -> list[Word]:
        """Take one decode's words; commit the prefix it shares with the previous one, up to
        words ending by `horizon` (a word at the buffer's edge may be cut mid-way: with a 0 s
        guard, "to Wednesday" committed as "to one" twice in a row and stayed wrong)."""
        new = self._new_part(words)
        k = 0
        while (k < min(len(new), len(self.tail)) and new[k].norm == self.tail[k].norm
               and new[k].end <= horizon):
            k += 1
        self.commit(new[:k])
        self.tail = new[k:]
        return new[:k]

    def commit(self, words: list[Word]) -> None:
        if words:
            self.committed.extend(words)
            self.stable_end = max(self.stable_end, words[-1].end)

    def _after_overlap(self, words: list[Word]) -> list[Word] | None:
        """Words after the run of `words` that repeats the stable tail (matched by text, not
        by time: alignments of different decodes disagree by up to ~0.1 s), or None."""
        tail = [w.norm for w in self.committed[-_MAX_NGRAM:]]
        norms = [w.norm for w in words]
        for n in range(len(tail), 1, -1):
            for k in range(min(len(words) - n, 2 * _MAX_NGRAM) + 1):
                if norms[k:k + n] == tail[-n:]:
                    return words[k + n:]
        return None

    def commit_all(self, words: list[Word]) -> None:
        """The decode covers a finished stretch of speech: all of it is stable."""
        rest = self._after_overlap(words) if self.committed else None
        if rest is None and self.committed:
            # the decode did not repeat the context words (they were in its prompt): keep what
            # ends after the stable end
            rest = [w for w in words if w.end > self.stable_end + 0.05]
        self.commit(rest if rest is not None else self._new_part(words))
        self.tail = []
