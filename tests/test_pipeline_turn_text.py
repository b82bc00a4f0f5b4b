"""The LLM text witness of the turn detector: its prompt, its probability from the engine, and
the fallback to the detector's own scorer when the engine cannot answer in time."""

from __future__ import annotations

import threading
import time

import pytest

from llm_engine import LLMEngine
from pipeline.turn_text import BackgroundScorer, EngineCompletenessScorer
from tests.llm_helpers import make_tiny_llama
from tests.waiting import wait_until

pytestmark = pytest.mark.unit
TEMPLATE = "{% for m in messages %}t3 {{ m['content'] }} t4 {% endfor %}{% if add_generation_prompt %}t5{% endif %}"


class Const:
    def __init__(self, p: float) -> None:
        self.p, self.texts = p, []

    def probability(self, text: str) -> float:
        self.texts.append(text)
        return self.p


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-turn-text")
    make_tiny_llama(path, seed=3)
    (path / "chat_template.jinja").write_text(TEMPLATE)
    return LLMEngine.from_pretrained(path, num_blocks=64, block_size=8)


def test_the_prompt_is_the_chat_so_far_and_the_open_user_message(engine):
    system = [{"role": "system", "content": "t9 t9 t9"}]
    scorer = EngineCompletenessScorer(engine, Const(0.5), context=lambda: system)
    assert 4 in scorer.end_ids  # the template's end of a message (t4) is an end token
    ids = scorer.prompt_ids("t20 t21 t22...")  # Whisper's trailing punctuation is dropped
    assert ids == [3, 9, 9, 9, 4, 3, 20, 21, 22]
    assert scorer.prompt_ids(" ... ") is None
    assert scorer.prompt_ids("t20 30%.") == scorer.prompt_ids("t20 30 percent")


def test_probability_is_the_engines_and_ignores_trailing_punctuation(engine):
    fallback = Const(0.123)
    scorer = EngineCompletenessScorer(engine, fallback)
    want = engine.next_token_probability([3, 20, 21, 22], scorer.end_ids)
    assert scorer.probability("t20 t21 t22") == pytest.approx(want, rel=1e-6)
    assert scorer.probability("t20 t21 t22?") == pytest.approx(want, rel=1e-6)
    assert scorer.calls == 1  # the same prompt is not asked twice
    assert scorer.probability("t20 t21 t23") != pytest.approx(want, rel=1e-3)
    assert fallback.texts == [] and scorer.fallbacks == 0
    assert scorer.probability("...") == 0.123  # no words: the detector's own scorer
    with pytest.raises(ValueError):
        scorer.probability(None)


class SlowEngine:
    """The engine's interface, answering None as score_prompt does past its timeout."""

    def __init__(self, engine) -> None:
        self.tokenizer, self.asked = engine.tokenizer, []

    def score_prompt(self, ids, end_ids, timeout_s):
        self.asked.append(timeout_s)
        return None


def test_an_engine_that_cannot_answer_in_time_hands_over_to_the_fallback(engine):
    slow = SlowEngine(engine)
    scorer = EngineCompletenessScorer(slow, Const(0.8), timeout_s=0.07)
    assert scorer.probability("t20 t21") == 0.8
    assert slow.asked == [0.07] and scorer.fallbacks == 1
    assert scorer.probability("t20 t21") == 0.8 and len(slow.asked) == 2  # a miss is asked again
    with pytest.raises(ValueError, match="timeout_s"):
        EngineCompletenessScorer(engine, Const(0.5), timeout_s=0)


class Gated:
    """A blocking scorer that answers once let through (the engine, busy elsewhere)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.gate = threading.Semaphore(0)
        self.fail = False

    def probability(self, text: str) -> float:
        self.asked.append(text)
        self.gate.acquire()
        if self.fail:
            raise RuntimeError("engine gone")
        return len(text) / 100


def test_the_background_scorer_never_blocks_and_scores_only_the_newest_words():
    inner = Gated()
    bg = BackgroundScorer(inner)
    t0 = time.monotonic()
    assert bg.peek("what is") is None  # being scored: the caller goes on
    wait_until(lambda: inner.asked == ["what is"])
    assert bg.peek("what is the") is None and bg.peek("what is the capital") is None  # queued: newest wins
    assert time.monotonic() - t0 < 1.0  # nothing above waited on the scorer
    inner.gate.release()
    wait_until(lambda: bg.peek("what is") is not None)
    assert bg.peek("what is") == pytest.approx(0.07)
    inner.gate.release()
    wait_until(lambda: bg.peek("what is the capital") is not None)
    assert inner.asked == ["what is", "what is the capital"]  # "what is the" was never asked
    assert bg.peek("what is") is not None
    bg.forget()  # a new turn: the conversation before the words changed
    assert bg.peek("what is") is None  # asked again
    inner.gate.release()
    wait_until(lambda: bg.peek("what is") is not None)
    assert inner.asked == ["what is", "what is the capital", "what is"]
    inner.fail = True  # a failing witness answers "no evidence", and the thread lives on
    assert bg.peek("boom") is None
    inner.gate.release()
    wait_until(lambda: bg.peek("boom") is not None)
    assert bg.peek("boom") == 0.5 and bg._thread.is_alive()
    bg.close()
    assert not bg._thread.is_alive() and bg.peek("after close") == 0.5
    with pytest.raises(ValueError):
        bg.peek(None)


def _probe(size: int, seed: int = 0):
    import numpy as np

    from pipeline.turn_probe import TextProbe

    rng = np.random.default_rng(seed)
    return TextProbe(rng.normal(size=size), rng.uniform(0.5, 2.0, size=size), rng.normal(size=size), 0.3, "tiny")


def test_with_a_probe_p_is_read_from_the_prompts_final_hidden_state(engine):
    probe = _probe(engine.model.cfg.hidden_size)
    scorer = EngineCompletenessScorer(engine, Const(0.5), probe=probe)
    scored = engine.score_prompt([3, 20, 21, 22], scorer.end_ids)
    got = scorer.probability("t20 t21 t22")
    assert got == pytest.approx(probe.probability(scored.hidden), rel=1e-9)
    assert got != pytest.approx(scored.next_token_p, rel=1e-3)  # not the raw P
    with pytest.raises(ValueError, match="8-wide"):
        EngineCompletenessScorer(engine, Const(0.5), probe=_probe(8))


def test_a_probe_round_trips_and_a_corrupt_file_is_a_clear_error(tmp_path):
    import numpy as np

    from pipeline.turn_probe import TextProbe

    probe = _probe(16, seed=1)
    probe.save(tmp_path / "p.npz")
    back = TextProbe.load(tmp_path / "p.npz")
    h = np.linspace(-1, 1, 16)
    assert back.model == "tiny" and back.probability(h) == pytest.approx(probe.probability(h), rel=1e-12)
    with pytest.raises(ValueError, match="finite"):
        probe.probability(np.full(16, np.nan))
    with pytest.raises(ValueError, match="16"):
        probe.probability(np.zeros(15))
    (tmp_path / "bad.npz").write_bytes(b"not a probe")
    with pytest.raises(ValueError, match="cannot read the text probe"):
        TextProbe.load(tmp_path / "bad.npz")
    with pytest.raises(ValueError, match="scale"):
        TextProbe(np.zeros(4), np.zeros(4), np.zeros(4), 0.0, "tiny")


def test_the_session_asks_the_llm_only_with_our_engine_and_a_word_scorer_to_fall_back_on(engine):
    from types import SimpleNamespace

    from llm_engine import FakeLLM
    from pipeline.config import SessionConfig
    from pipeline.session import _llm_witness
    from turn_detection import EndOfTurnDetector

    detector = EndOfTurnDetector(vad=None, classifier=None, text_scorer=Const(0.5))
    ours = SimpleNamespace(llm=None, engine=engine, detector=detector)
    assert _llm_witness(SessionConfig(), ours)
    assert not _llm_witness(SessionConfig(turn_text="words"), ours)
    assert _llm_witness(SessionConfig(turn_text="llm-raw"), ours)
    assert not _llm_witness(SessionConfig(), SimpleNamespace(llm=object(), engine=None, detector=detector))
    assert not _llm_witness(SessionConfig(), SimpleNamespace(llm=None, engine=FakeLLM(), detector=detector))
    no_words = EndOfTurnDetector(vad=None, classifier=None)  # e.g. turn_detection = "vad"
    assert not _llm_witness(SessionConfig(), SimpleNamespace(llm=None, engine=engine, detector=no_words))
    with pytest.raises(ValueError, match="turn_text"):
        SessionConfig(turn_text="sound")


def test_the_witness_context_is_trimmed_as_the_real_request(engine):
    from pipeline.config import SessionConfig
    from pipeline.context import fit_context
    from pipeline.session import turn_context

    config = SessionConfig(max_tokens=8, sentence_grace_tokens=4, context_tokens=64)
    history = [{"role": "system", "content": "t9 t9"}]
    for i in range(40):
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"t{20 + i} t{21 + i} t{22 + i}"})
    kept = turn_context(engine, history, config.trim)
    assert kept[0] == history[0] and len(kept) < len(history)
    words = {"role": "user", "content": "t90 t91"}
    assert kept == fit_context(engine, [*history, words], 12, max_tokens=64)[:-1]  # the real request's prefix
    assert len(engine.encode_chat([*kept, words])) + 12 <= 64


def test_only_the_embedded_model_gets_the_probe_and_its_policy():
    from pipeline.config import SessionConfig
    from pipeline.session import _witness_probe
    from turn_detection.policy import LLM_PROBE_POLICY, LLM_TEXT_POLICY

    probe, policy = _witness_probe(SessionConfig())
    assert probe is not None and policy == LLM_PROBE_POLICY and LLM_PROBE_POLICY.is_file()
    assert probe.model == "smollm2-135m-instruct" and probe.hidden_size == 576
    assert _witness_probe(SessionConfig(model="other.gguf")) == (None, LLM_TEXT_POLICY)
    assert _witness_probe(SessionConfig(turn_text="llm-raw")) == (None, LLM_TEXT_POLICY)


@pytest.mark.integration
def test_the_shipped_probe_ranks_whole_sentences_above_their_prefixes_on_sentences_it_never_saw():
    """The TEST request sentences and TEST answers (read by no fit or choice) and spoken commands
    of other shapes, after the system prompt alone and after a conversation in no training set:
    the probe ranks each whole sentence above its own prefixes as well as the raw P does, scores
    whole commands and short answers high where the raw P does not, and the conversation does
    not make prefixes look whole."""
    import numpy as np

    from benchmarks.turn_llm_text import HISTORY
    from llm_engine import LLMEngine
    from pipeline.config import DEFAULT_INSTRUCTIONS
    from pipeline.turn_probe import TextProbe, figures, states
    from turn_detection.training import sentences
    from turn_detection.training.sentences import TEST
    from turn_detection.training.text_corpus import text_prefixes

    engine = LLMEngine.for_voice()
    system = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}]
    probe = TextProbe.load()
    commands = ("Turn the living room lights down to 30 percent", "Set a timer for ten minutes",
                "Text Maria that I'm running ten minutes late")
    texts, labels, groups = text_prefixes((*TEST, *commands))
    n = len(TEST) + len(commands)
    wholes = (*sentences.ANSWERS_TRAIN, *sentences.ANSWERS_VALIDATION, *sentences.ANSWERS_TEST)
    more, more_labels, more_groups = text_prefixes(sentences.ANSWERS_TEST, wholes)
    texts, labels, groups = texts + more, np.concatenate([labels, more_labels]), np.concatenate([groups, more_groups + n])
    results = {}
    try:
        for name, context in (("system", system), ("history", [*system, *HISTORY])):
            scorer = EngineCompletenessScorer(engine, Const(0.5), context=lambda c=context: c, timeout_s=30.0)
            raw, hidden = states(engine, scorer, texts)
            p = np.array([probe.probability(h) for h in hidden])
            results[name] = (figures(p, labels, groups, n), figures(raw, labels, groups, n), p, raw)
    finally:
        engine.close()
    whole = [i for i, t in enumerate(texts) if t in commands]
    assert len(whole) == 3
    for name, (ours, theirs, p, raw) in results.items():
        assert ours["mean_auc"] >= 0.93 and ours["mean_auc"] >= theirs["mean_auc"] - 0.03, (name, ours, theirs)
        assert ours["complete_median"] >= 0.8 > theirs["complete_median"], (name, ours, theirs)
        assert ours["prefix_median"] <= 0.05, (name, ours)
        # whole commands: the probe high, the raw P not (0.52-0.62 after the history with a Zen 1
        # host's AVX2 int8 kernels; < 0.6 on the AVX-512 hosts before), each by a clear margin
        assert (p[whole] >= 0.8).all() and (raw[whole] < 0.7).all(), (name, p[whole], raw[whole])
        assert (p[whole] - raw[whole] >= 0.2).all(), (name, p[whole], raw[whole])
        # whole short answers ("Thanks a lot!", "Not yet."): 0.69 / 0.72 median on a Zen 1 host
        # (the raw P 0.30 / 0.35; the probe fit on requests alone 0.22 / 0.27), while their
        # unfinished starts ("What about", "Sure, but make it") stay low
        assert ours["answers_median"] >= 0.55 and ours["answers_median"] - theirs["answers_median"] >= 0.2, (name, ours)
        assert ours["answer_prefixes_above_half"] <= 0.15, (name, ours)
    assert results["history"][0]["prefix_above_half"] <= results["system"][0]["prefix_above_half"] + 0.03, results
