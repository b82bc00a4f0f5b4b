from __future__ import annotations

import numpy as np
import pytest

from parley.errors import ModelNotFoundError
from turn_detection.completeness import CompletenessScorer, normalize
from turn_detection.training import sentences
from turn_detection.training.sentences import TEST, TRAIN, VALIDATION
from turn_detection.training.text_corpus import examples, text_prefixes
from turn_detection.training.train_text import fit, ranking


@pytest.fixture(scope="module")
def scorer():
    return CompletenessScorer.load()


@pytest.mark.unit
def test_shipped_scorer_ranks_held_out_sentences_above_their_prefixes(scorer):
    # VALIDATION and TEST sentences are never trained on (train_text fits TRAIN only).
    assert not set(VALIDATION + TEST) & set(TRAIN)
    val = ranking(scorer, VALIDATION)
    assert val["mean_auc"] >= 0.95  # 0.968 when shipped
    assert val["top_rate"] >= 0.75  # complete above every one of its prefixes: 82%
    test = ranking(scorer, TEST)
    assert test["mean_auc"] >= 0.9  # 0.946


@pytest.mark.unit
@pytest.mark.parametrize(("complete", "prefix"), [
    ("Could you order a taxi to the airport for tomorrow morning?", "Could you order a taxi to the"),
    ("What is the weather going to be like on Saturday?", "What is the weather going to be like on"),
    ("I need to buy a birthday present for my nephew.", "I need to buy a birthday present for my"),
    ("Please feed the cat before you leave.", "Please feed the cat before you"),
])
def test_unseen_sentence_outscores_its_function_word_cut(scorer, complete, prefix):
    assert scorer.probability(complete) > scorer.probability(prefix) + 0.2
    assert scorer.probability(prefix) < 0.25


@pytest.mark.unit
def test_normalize_and_punctuation_do_not_matter(scorer):
    assert normalize("Set an alarm for 6:30, please!") == ["set", "an", "alarm", "for", "0", "please"]
    # Whisper's signs read as the words the sentences were trained on
    assert normalize("Lights down to 30%.") == normalize("Lights down to 30 percent")
    assert normalize("It was $5.20, OK") == ["it", "was", "0", "dollars", "ok"]
    assert scorer.probability("Turn the living room lights down to 30%") > 0.9  # 0.41 when "%" was dropped
    assert scorer.probability("Turn off the lights.") == scorer.probability("turn off the lights")
    assert 0.0 < scorer.probability("") < 1.0


@pytest.mark.unit
def test_fit_learns_from_prefixes():
    texts, labels, groups = examples(TRAIN[:60])
    assert labels.sum() == 60 and len(set(groups)) == 60
    small = fit(texts, labels, l2=1.0, bits=12)
    assert ranking(small, TRAIN[:60])["mean_auc"] > 0.97  # fits what it saw
    assert ranking(small, VALIDATION[:40])["mean_auc"] > 0.8  # and carries some of it over


@pytest.mark.unit
def test_a_prefix_that_is_a_whole_answer_is_not_called_unfinished():
    texts, labels, groups = text_prefixes(["Yes, and add milk.", "Okay then."], wholes=("Yes.", "Okay!"))
    assert texts == ["Yes, and", "Yes, and add", "Yes, and add milk.", "Okay then."]
    assert labels.tolist() == [0, 0, 1, 1] and groups.tolist() == [0, 0, 0, 1]
    plain, plain_labels, _ = text_prefixes(["Yes, and add milk."])
    assert plain[0] == "Yes," and plain_labels[0] == 0  # no wholes given: every prefix is one


@pytest.mark.unit
def test_the_answers_split_three_ways_and_share_no_line_with_the_requests():
    splits = (sentences.ANSWERS_TRAIN, sentences.ANSWERS_VALIDATION, sentences.ANSWERS_TEST)
    assert [len(s) for s in splits] == [48, 24, 24]
    norm = [{" ".join(normalize(x)) for x in s} for s in splits]
    assert sum(len(s) for s in norm) == 96 and not (norm[0] & norm[1] or norm[0] & norm[2] or norm[1] & norm[2])
    from turn_detection.training.families import family_sentences

    requests = {" ".join(normalize(x)) for x in TRAIN + VALIDATION + TEST + family_sentences()}
    assert not set().union(*norm) & requests


@pytest.mark.unit
def test_bad_inputs(tmp_path, scorer):
    with pytest.raises(ValueError):
        scorer.probability(3)
    with pytest.raises(ValueError):
        CompletenessScorer(np.zeros(100))
    with pytest.raises(ValueError):
        CompletenessScorer(np.full(64, np.nan))
    with pytest.raises(ModelNotFoundError):
        CompletenessScorer.load(tmp_path / "none.npz")
    path = tmp_path / "w.npz"
    scorer.save(path)
    assert CompletenessScorer.load(path).probability("play some jazz") == pytest.approx(
        scorer.probability("play some jazz"), abs=1e-3)


@pytest.mark.unit
def test_loso_reads_another_text_witness_from_a_table(tmp_path):
    import json

    from turn_detection.training.loso import TableScorer

    path = tmp_path / "scores.json"
    path.write_text(json.dumps({"cost": {}, "scores": {"What time is it?": 0.8, "What time": 0.01}}))
    scorer = TableScorer.load(path)
    assert scorer.probability("What time is it?") == 0.8 and scorer.probability("What time") == 0.01
    with pytest.raises(KeyError, match="rebuild"):
        scorer.probability("What")
    with pytest.raises(ValueError, match="probabilities"):
        TableScorer({"x": 1.5})
