"""Text for the completeness scorer: complete turns and their word-boundary prefixes.

The source is the TRAIN request sentences (the split the prosodic model trains on, so the
validation and test sentences stay unseen). A template grammar of requests was tried as
extra text and hurt: 4000 generated sentences beside the 400 real ones took the mean
per-sentence AUC on VALIDATION from 0.968 to 0.937, 300 of them to 0.960 (its few endings
taught the model its own templates), so only real sentences are used."""

from __future__ import annotations

import numpy as np

from turn_detection.completeness import normalize


def _cuts(word_lists: list[list[str]]) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    """Per word list the whole (label 1) and every shorter word prefix (label 0)."""
    texts, labels, groups = [], [], []
    for i, words in enumerate(word_lists):
        for k in range(1, len(words) + 1):
            texts.append(words[:k])
            labels.append(1.0 if k == len(words) else 0.0)
            groups.append(i)
    return texts, np.array(labels), np.array(groups)


def examples(sentences: list[str] | tuple[str, ...]) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    """Per sentence its normalized words (label 1) and every word-boundary prefix (label 0).
    -> (word lists, labels, sentence index of each example)."""
    return _cuts([normalize(s) for s in sentences])


def text_prefixes(sentences: list[str] | tuple[str, ...], wholes: tuple[str, ...] = ()
                  ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """As `examples`, but the text as written (case and inner punctuation kept, cut at spaces):
    what a witness that reads the STT's text, like the voice LLM, sees. A prefix that is itself
    one of `wholes` (by its normalized words: "Yes," of "Yes, and add milk" when "Yes." is a
    whole turn) is left out rather than called unfinished.
    -> (texts, labels, sentence index of each example)."""
    cut, labels, groups = _cuts([s.split() for s in sentences])
    whole = {tuple(normalize(w)) for w in wholes}
    keep = [i for i, words in enumerate(cut) if labels[i] > 0 or tuple(normalize(" ".join(words))) not in whole]
    return [" ".join(cut[i]) for i in keep], labels[keep], groups[keep]
