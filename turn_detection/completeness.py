"""Text completeness: P(the words so far are a whole turn), whoever speaks them.

A logistic regression on hashed features of the transcript's last words (the words, their
suffixes and a small function-word lexicon), trained on complete request sentences against
their own word-boundary prefixes (`turn_detection/training/train_text.py`). It reads only the
text, so it does not care about the voice: the prosodic model learned our synthesizers
(issue 21: 31% of turns cut off on unheard voices); the words do not change with the voice.
Cost: one normalization and ~20 hashed look-ups, tens of microseconds (benchmarks/turn.py
accounts it in the per-decision CPU time)."""

from __future__ import annotations

import math
import re
import zlib
from pathlib import Path

import numpy as np

from parley.errors import ModelCorruptError, ModelNotFoundError

DEFAULT_TEXT_WEIGHTS = Path(__file__).with_name("eot_text.npz")
HASH_BITS = 15  # 32768 weights (64 KB as float16); collisions cost < 0.001 AUC at 16 bits here

# Closed-class words by role: a turn that ends on one of these is almost never finished.
# The class is a feature of its own, so an unseen word of a known class still counts.
_LEXICON: dict[str, tuple[str, ...]] = {
    "det": ("the", "a", "an", "this", "that", "these", "those", "my", "your", "our", "their", "his",
            "her", "its", "some", "any", "every", "each", "no", "another", "all", "both", "which", "what"),
    "prep": ("to", "of", "for", "with", "from", "in", "on", "at", "by", "about", "into", "than", "as",
             "after", "before", "until", "near", "between", "without", "through", "over", "under",
             "around", "during", "across", "behind", "like", "off", "up", "down", "out"),
    "conj": ("and", "or", "but", "so", "because", "if", "when", "while", "although", "though",
             "unless", "whether", "since", "where", "who", "whom", "whose", "how", "why", "then"),
    "aux": ("is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "have",
            "has", "had", "will", "would", "could", "should", "can", "may", "might", "must", "shall",
            "won't", "can't", "don't", "doesn't", "didn't", "isn't", "aren't", "i'm", "i'd", "i'll",
            "i've", "it's", "we're", "you're", "let's", "there's"),
    "subj": ("i", "we", "they", "he", "she"),  # a subject: the verb is still to come
    "obj": ("me", "us", "him", "them", "it", "you", "there", "here", "now", "today", "tonight",
            "tomorrow", "yesterday", "again", "too", "please", "thanks"),  # often the last word
    "filler": ("um", "uh", "er", "erm", "hmm", "well", "maybe", "just", "also", "really", "very",
               "actually"),
}
_CLASS = {w: c for c, words in _LEXICON.items() for w in words}
_NOT_WORD = re.compile(r"[^a-z0-9' ]+")
# one number as Whisper writes it: "7", "6:30", "5.20", "10,000" (a trailing "." or "," ends it)
_NUMBER = re.compile(r"[0-9]+(?:[.,:][0-9]+)*")
_DOLLARS = re.compile(r"\$\s*([0-9]+(?:[.,][0-9]+)*)")


def normalize(text: str) -> list[str]:
    """Lower case words without punctuation; a number becomes '0', its signs words ("$5.20" ->
    "0 dollars", "30%" -> "0 percent"): Whisper writes "30%" where the training sentences say
    "thirty percent", and the sign is what ends the turn ("... down to 30%" scored 0.41 with
    the "%" dropped, 0.97 read as "percent"). Training the scorer on a digit spelling of the
    corpus too was tried and gained nothing on 15 number-ending requests (15/15 above their
    cut either way), validation AUC 0.968 -> 0.967."""
    t = _DOLLARS.sub(r" \1 dollars ", text.lower().replace("-", " ").replace("%", " percent "))
    t = _NOT_WORD.sub(" ", _NUMBER.sub(" 0 ", t))
    return [w.strip("'") for w in t.split() if w.strip("'")]


def _length_bucket(n: int) -> str:
    return str(n) if n <= 4 else "5-6" if n <= 6 else "7-9" if n <= 9 else "10+"


def features(words: list[str]) -> list[str]:
    """The named features of a normalized transcript (hashed by `feature_ids`)."""
    if not words:
        return ["empty"]
    w1 = words[-1]
    w2 = words[-2] if len(words) > 1 else "<s>"
    w3 = words[-3] if len(words) > 2 else "<s>"
    c1, c2 = _CLASS.get(w1, "open"), _CLASS.get(w2, "open" if w2 != "<s>" else "<s>")
    n = _length_bucket(len(words))
    first = words[0]
    return [
        "bias", f"w1={w1}", f"w2={w2}", f"w21={w2}_{w1}", f"w321={w3}_{w2}_{w1}",
        f"s2={w1[-2:]}", f"s3={w1[-3:]}", f"c1={c1}", f"c21={c2}_{c1}", f"c1n={c1}_{n}",
        f"n={n}", f"first={first}", f"fc1={_CLASS.get(first, 'open')}_{c1}", f"fw1={first}_{c1}_{n}",
        f"len1={min(len(w1), 10)}", f"c3={_CLASS.get(w3, 'open')}_{c2}_{c1}",
    ]


def feature_ids(words: list[str], bits: int = HASH_BITS) -> np.ndarray:
    """Stable hashes (crc32, not Python's salted hash) of `features` into [0, 2**bits)."""
    mask = (1 << bits) - 1
    return np.array([zlib.crc32(f.encode()) & mask for f in features(words)], dtype=np.int64)


class CompletenessScorer:
    """`probability(text)` -> P(complete turn). Weights: float [2**bits] + a scalar bias."""

    def __init__(self, weights: np.ndarray, bias: float = 0.0):
        w = np.asarray(weights, dtype=np.float32).reshape(-1)
        bits = round(math.log2(len(w))) if len(w) else -1
        if bits < 4 or len(w) != 1 << bits or not np.all(np.isfinite(w)) or not math.isfinite(bias):
            raise ValueError("completeness weights must be a finite vector of 2**bits values (bits >= 4)")
        self.weights, self.bias, self.bits = w, float(bias), bits

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TEXT_WEIGHTS) -> CompletenessScorer:
        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(str(path), "text completeness weights not found")
        try:
            with np.load(path) as z:
                return cls(z["weights"], float(z["bias"]))
        except (OSError, KeyError, ValueError) as e:
            raise ModelCorruptError(str(path), f"cannot load text completeness weights: {e}") from e

    def save(self, path: str | Path) -> None:
        np.savez_compressed(path, weights=self.weights.astype(np.float16), bias=np.float32(self.bias))

    def logit(self, text: str) -> float:
        if not isinstance(text, str):
            raise ValueError("text must be a str")
        return float(self.weights[feature_ids(normalize(text), self.bits)].sum()) + self.bias

    def probability(self, text: str) -> float:
        return 1.0 / (1.0 + math.exp(-self.logit(text)))
