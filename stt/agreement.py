"""LocalAgreement-2 (as in whisper_streaming): a word is stable once two consecutive decodes of
the growing buffer agree on it. Times are in the utterance buffer's clock (seconds).

Every decode re-recognizes the stable words whose audio it covers; `_new_part` finds where
they end in its words. Text alone cannot say which "no" of "no, no" a stable "no" is, and
time alone cannot either: word boundaries of two decodes of the same audio differ by up to
~0.4 s next to a pause (" ready." ended at 1.58 s in one decode, " ready" at 1.34 s and " it"
at 1.34-1.64 s in the next). So the stable words are aligned to the decode's words by text,
pairing only words whose times overlap; what follows the last aligned word is new. Where the
newest stable words were heard differently this time, time decides: what lies mostly after
the stable words is new."""

from __future__ import annotations

from stt.events import Word

_END_PUNCT = ".?!,;:"
# word boundaries of two decodes of the same audio differ by this much: up to ~0.4 s next to
# a pause (a stable "yes" at 0.86-1.00 s came back at 1.28-1.42 s, a first "Yes," taking in
# the pause; at 0.1 s it did not align and was said twice, 1 replay in 8)
_DRIFT_S = 0.4
_MAX_ALIGN = 32  # stable words aligned at most (the newest ones)


def _same_word(a: Word, b: Word) -> bool:
    return a.norm == b.norm and b.start < a.end + _DRIFT_S and b.end > a.start - _DRIFT_S


def _overlap(a: Word, b: Word) -> float:
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


def align_end(stable: list[Word], words: list[Word]) -> tuple[int, int]:
    """Longest time-consistent common subsequence of `stable` and `words` (ties: the pairing
    whose spans overlap most). Returns (stable words aligned through, index in `words` after
    the last aligned one); (0, 0) when nothing aligns."""
    m, n = len(stable), len(words)
    # score[i][j]: best alignment of stable[:i] and words[:j]. A pair is worth 1 + its overlap
    # in seconds / 64: the overlaps of one alignment sum to under 30 s (one window), so the
    # count of pairs decides first and the overlap only breaks ties
    score = [[0.0] * (n + 1) for _ in range(m + 1)]
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            best = max(score[i - 1][j], score[i][j - 1])
            if _same_word(stable[i - 1], words[j - 1]):
                best = max(best, score[i - 1][j - 1] + 1.0 + _overlap(stable[i - 1], words[j - 1]) / 64)
            score[i][j] = best
    i, j = m, n
    while i > 0 and j > 0:  # walk back to the last pair of the best alignment
        if score[i][j] == score[i - 1][j]:
            i -= 1
        elif score[i][j] == score[i][j - 1]:
            j -= 1
        else:
            return i, j
    return 0, 0


class HypothesisBuffer:
    def __init__(self, min_probability: float = 0.0) -> None:
        if not 0.0 <= min_probability < 1.0:
            raise ValueError(f"min_probability must be in [0, 1), got {min_probability}")
        self.min_probability = min_probability  # of both agreeing decodes' word (see insert)
        self.committed: list[Word] = []
        self.tail: list[Word] = []  # the last decode's words after the stable prefix
        self.stable_end = 0.0
        self._prev_horizon = float("inf")  # the previous decode's horizon
        self._held: Word | None = None  # the last stable word with the punctuation held back

    def copy(self) -> HypothesisBuffer:
        other = HypothesisBuffer(self.min_probability)
        other.committed, other.tail = list(self.committed), list(self.tail)
        other.stable_end, other._prev_horizon, other._held = self.stable_end, self._prev_horizon, self._held
        return other

    def _new_part(self, words: list[Word], from_s: float = 0.0) -> list[Word]:
        """The words of a decode of the buffer from `from_s` on that come after the stable ones."""
        # only stable words whose audio the decode has can be in it again: in a decode that
        # starts after a stable "yes" ends, a "yes" is a second one
        stable = [w for w in self.committed[-_MAX_ALIGN:] if w.end > from_s]
        if not stable:
            return list(words)
        i, k = align_end(stable, words)
        new = words[k:]
        if i < len(stable) and new:
            # the newest stable words were heard differently ("to" vs "Tuesday,", "dollar" vs
            # "$5", "pairs" vs "Paris?"): a word is new when most of its audio is past their
            # end. A margin for alignment drift kept " Paris?" (1.32-1.94 s) after a stable
            # " pairs" ending at 1.64 s; without one a squeezed " and" is lost now and then.
            t = self.stable_end + 1e-3  # times are 20 ms steps: a tie is no majority
            first = next((x for x, w in enumerate(new) if (w.start + w.end) / 2 > t), len(new))
            new = new[first:]  # a piece kept attached ("5" ".20") continues a stable word's audio
        return new

    def insert(self, words: list[Word], horizon: float = float("inf"), from_s: float = 0.0) -> list[Word]:
        """Take one decode's words; commit the prefix it shares with the previous one, up to
        words ending by `horizon` (a word at the buffer's edge may be cut mid-way: with a 0 s
        guard, "to Wednesday" committed as "to one" twice in a row and stayed wrong). The word
        must also have been inside the previous decode's horizon: espeak's "lights", cut at one
        decode's edge as "life", was heard "life" again by the next decode (its own guard passed)
        and stayed wrong, while a decode of the whole clip hears "lights"."""
        new = self._new_part(words, from_s)
        limit, self._prev_horizon = min(horizon, self._prev_horizon), horizon
        k = 0
        while (k < min(len(new), len(self.tail)) and new[k].norm == self.tail[k].norm
               and new[k].end <= limit
               and min(new[k].probability, self.tail[k].probability) >= self.min_probability):
            k += 1
        self.commit(new[:k])
        self.tail = new[k:]
        return new[:k]

    def commit(self, words: list[Word]) -> None:
        if words:
            self.release(words[0].text[:1].isupper())
            self.committed.extend(words)
            self.stable_end = max(self.stable_end, words[-1].end)

    def commit_all(self, words: list[Word], from_s: float = 0.0, hold_end: bool = False,
                   skip: int | None = None) -> None:
        """The decode covers a finished stretch of speech: all of it is stable. `hold_end`:
        keep back the punctuation that ends it until we know whether speech follows. `skip`:
        the decode's first `skip` words are known to say the stable words again (by text, see
        Utterance.preview); None: aligned here by text and time."""
        new = self._new_part(words, from_s) if skip is None else list(words[skip:])
        self.commit(new)
        self.tail = []
        last = self.committed[-1] if new else None
        if hold_end and last is not None and last.text != last.text.rstrip(_END_PUNCT):
            # a pause of ~100 ms ends a sentence or only a phrase ("three tablespoons of
            # sugar. for the cake", "costs. $5.20" on diphone voices): the next words decide
            self._held = last
            self.committed[-1] = Word(last.text.rstrip(_END_PUNCT), last.start, last.end, last.probability,
                                      last.attached)

    def release(self, keep: bool = True) -> None:
        """Give back (keep=True) or drop the punctuation `commit_all` held back. Either way the
        stable text only grows: the punctuation goes right after the last stable word."""
        if self._held is not None and keep:
            self.committed[-1] = self._held
        self._held = None
