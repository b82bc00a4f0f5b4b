"""benchmarks/draft_trees.py: the tree it drafts is the likeliest closed set of paths within the
node budget (n-gram continuation first), and a replay's tau is the tokens a pass would emit."""

from __future__ import annotations

import pytest
import torch

from llm_engine.speculative.drafter import Draft


class _Head:
    """children(path): token 10*depth + i with log-probability -(i + 1) * (depth + 1) / 4."""

    def children(self, sid, ctx, path, width):
        d = len(path)
        return [(10 * (d + 1) + i, -(i + 1) * (d + 1) / 4) for i in range(width)]

    def accepted(self, sid, ctx, **kw):
        pass

    def release(self, sid):
        pass


class _Lookup:
    def __init__(self, ids):
        self.ids = ids

    def propose(self, sid, ctx, k):
        return Draft(self.ids[:k])


class _Hybrid(_Head):
    def __init__(self, ngram=()):
        self.head, self.lookup = _Head(), _Lookup(list(ngram))


@pytest.mark.unit
def test_tree_keeps_the_likeliest_closed_paths_with_ngram_first():
    from benchmarks.draft_trees import draft_tree

    chain = draft_tree(_Hybrid(), "s", [1], (1, 4, 4), with_ngram=False)
    assert chain == {(10,), (10, 20), (10, 20, 30), (10, 20, 30, 40)}
    tree = draft_tree(_Hybrid(), "s", [1], (2, 3, 5), with_ngram=False)
    # scores: (10) -.25, (11) -.5, (10,20) -.75, (11,20) -1.0, (10,21) -1.25, (10,20,30) -1.5
    assert tree == {(10,), (11,), (10, 20), (11, 20), (10, 21)}
    assert all(len(p) == 1 or p[:-1] in tree for p in tree)
    mixed = draft_tree(_Hybrid([7, 8]), "s", [1], (2, 3, 4), with_ngram=True)
    assert mixed == {(7,), (7, 8), (10,), (11,)}


@pytest.mark.unit
def test_replay_counts_accepted_path_plus_one_per_pass():
    from benchmarks.draft_trees import replay

    feats = torch.zeros(12, 4)
    # the chain drafts 10, 20, 30; the reply continues 10, 20, then diverges (99)
    refs = [("s", [1, 2], [5, 10, 20, 99, 10, 20, 30, 40], feats)]
    r = replay(_Hybrid(), refs, (1, 3, 3), with_ngram=False)
    # pass 1 after [5]: 10 20 kept + 99; pass 2 after 99: 10 20 30 kept + 40 -> 7 tokens, 2 passes
    assert r == {"tau": 3.5, "passes": 2}
