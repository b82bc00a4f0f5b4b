"""parley.cores.CoreGate, and the stages that share one: the engine thread waits while the
synthesizer holds it; the STT waits while the engine computes a reply's first tokens at 2 kernel
threads. Timings here are generous bounds on waits, not speed targets."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from llm_engine import LLMEngine, SamplingParams
from parley.cores import CoreGate
from tests.llm_helpers import make_tiny_llama
from tests.waiting import wait_until
from tts import FakeSynthesizer

pytestmark = pytest.mark.unit


def _held_elsewhere(gate: CoreGate, release: threading.Event) -> threading.Thread:
    """A started thread that holds `gate` until `release` is set (10 s at most); returns once
    the hold is on."""
    def holder():
        with gate.hold():
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    wait_until(lambda: gate.held, 5, "the other thread's hold")
    return t


def test_wait_returns_at_once_when_nobody_holds_the_gate():
    assert CoreGate().wait() < 0.05
    with pytest.raises(ValueError, match="max_wait_s"):
        CoreGate(max_wait_s=0)


def test_wait_lasts_until_every_hold_ends_and_never_past_max_wait():
    gate = CoreGate(max_wait_s=5.0)
    released = threading.Event()

    def holder():
        with gate.hold(), gate.hold():  # nested: released when both end
            released.wait(5)
            time.sleep(0.2)

    t = threading.Thread(target=holder)
    t.start()
    wait_until(lambda: gate.held, 5, "the hold")
    released.set()
    waited = gate.wait()
    t.join()
    assert 0.15 <= waited < 4.0 and not gate.held
    short = CoreGate(max_wait_s=0.1)
    with short.hold():
        assert short.wait() < 0.05  # a thread never waits for its own hold
    let_go = threading.Event()
    t = _held_elsewhere(short, let_go)
    assert 0.09 <= short.wait() < 2.0  # a holder that never lets go does not starve the waiter
    let_go.set()
    t.join()


def test_the_synthesizer_holds_the_gate_while_its_backend_runs():
    seen = []

    class Probe(FakeSynthesizer):
        def _synthesize_impl(self, text: str) -> np.ndarray:
            seen.append(self.core_gate.held)
            return super()._synthesize_impl(text)

    synth = Probe()
    synth.core_gate = CoreGate()
    assert len(synth.synthesize("Hello there.").audio) > 0
    assert seen == [True] and not synth.core_gate.held


def test_the_engine_thread_steps_only_once_the_synthesizer_lets_go(tmp_path):
    make_tiny_llama(tmp_path, seed=3)
    eng = LLMEngine.from_pretrained(tmp_path, num_blocks=64, block_size=8)
    eng.core_gate = CoreGate(max_wait_s=10.0)
    done = threading.Event()
    with eng.core_gate.hold():
        eng.add_request(list(range(5, 20)), SamplingParams(max_tokens=4, temperature=0.0),
                        sink=lambda _d, final: final is not None and done.set())
        eng.ensure_worker()
        assert not done.wait(0.5)  # held: not one step
    assert done.wait(10)
    eng.close()


def test_a_session_built_on_our_engine_shares_one_gate_between_engine_and_synthesizer():
    from pipeline.components import load_components
    from pipeline.config import SessionConfig
    from turn_detection import FakeEndOfTurnDetector

    config = SessionConfig(llm="fake", stt="fake", tts="fake")
    assert config.tts_threads == 2
    comps = load_components(config, detector=FakeEndOfTurnDetector())
    assert isinstance(comps.engine.core_gate, CoreGate) and comps.engine.core_gate is comps.synthesizer.core_gate
    one = load_components(SessionConfig(llm="fake", stt="fake", tts="fake", tts_threads=1),
                          detector=FakeEndOfTurnDetector())
    assert one.engine.core_gate is None and one.synthesizer.core_gate is None  # one thread: nobody steps aside


# ---- the other direction: a reply's first tokens borrow the cores, the STT waits ----------

def test_a_thread_budget_is_the_calling_threads_alone():
    import torch

    from kernels.cpu_native import thread_budget, threads

    assert threads() == torch.get_num_threads()
    seen = []
    with thread_budget(3):
        assert threads() == 3
        with thread_budget(2):
            assert threads() == 2
        assert threads() == 3
        other = threading.Thread(target=lambda: seen.append(threads()))
        other.start()
        other.join()
        assert torch.get_num_threads() != 3  # torch's own setting untouched
    assert threads() == torch.get_num_threads() and seen == [torch.get_num_threads()]
    with pytest.raises(ValueError, match="thread_budget"), thread_budget(0):
        pass


def test_hold_if_idle_leaves_the_cores_to_running_work_and_work_waits_for_a_hold():
    gate = CoreGate(max_wait_s=5.0)
    with gate.hold_if_idle() as held:
        assert held and gate.held
    assert not gate.held
    with gate.work(), gate.hold_if_idle() as held:
        assert not held and not gate.held  # two threads beside a busy core: not borrowed
    release, entered = threading.Event(), []

    def worker():
        with gate.work():
            entered.append(time.perf_counter())

    with gate.hold_if_idle() as held:
        t = threading.Thread(target=worker)
        t.start()
        assert held and not release.wait(0.3) and not entered  # the work waits for the hold
    t.join(5)
    assert entered


def test_work_can_expect_a_hold_on_its_way_and_then_waits_for_its_end():
    gate = CoreGate(max_wait_s=5.0)
    t0 = time.perf_counter()
    with gate.work(expect_hold_s=0.2):  # none comes: it waits that long, no more
        assert 0.15 <= time.perf_counter() - t0 < 2.0
    order = []

    def borrower():
        time.sleep(0.1)
        with gate.hold_if_idle() as held:
            order.append(("held", held))
            time.sleep(0.2)
        order.append("released")

    t = threading.Thread(target=borrower)
    t.start()
    with gate.work(expect_hold_s=2.0):
        order.append("work")
    t.join(5)
    assert order == [("held", True), "released", "work"]


def _lead_engine(tmp_path, **kw):
    make_tiny_llama(tmp_path, seed=3)
    eng = LLMEngine.from_pretrained(tmp_path, num_blocks=64, block_size=8, **kw)
    eng.lead_gate, eng.lead_threads = CoreGate(), 2
    return eng


def _greedy(eng, prompt, n):
    done, out = threading.Event(), []
    eng.add_request(prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True),
                    sink=lambda _d, final: final is not None and (out.append(final), done.set()))
    eng.ensure_worker()
    assert done.wait(30)
    return out[0]


def test_the_engine_borrows_the_cores_for_a_replys_first_tokens_only(tmp_path):
    from kernels.cpu_native import threads
    from parley.cores import LEAD_TOKENS

    eng = _lead_engine(tmp_path)
    steps = []  # (gate held, kernel threads, tokens the step computed) per model step
    run = eng.runner.run

    def spy(batch, *a, **kw):
        steps.append((eng.lead_gate.held, threads(), sum(batch.num_tokens)))
        return run(batch, *a, **kw)

    eng.runner.run = spy
    assert eng.score_prompt(list(range(5, 30)), (1, 2), timeout_s=30) is not None  # prefill only
    assert steps and all(s[:2] == (False, 1) for s in steps)  # nobody waits on it
    steps.clear()
    out = _greedy(eng, list(range(5, 20)), LEAD_TOKENS + 4)  # plain decoding: a token a step
    assert len(out.token_ids) == LEAD_TOKENS + 4
    assert [s[:2] for s in steps] == [(True, 2)] * LEAD_TOKENS + [(False, 1)] * 4
    assert not eng.lead_gate.held
    eng.close()


def test_the_lead_keeps_its_hold_between_steps_so_no_decode_slips_in(tmp_path):
    from parley.cores import LEAD_TOKENS

    eng = _lead_engine(tmp_path)
    eng.lead_gate = CoreGate(max_wait_s=10.0)  # a slow CI step never lets a part in by timeout
    emitted, entered, first, stop = [], [], threading.Event(), threading.Event()

    def sink(_delta, final):
        if final is None:
            emitted.append(time.perf_counter())
            first.set()

    def decoder():  # an STT decode's parts, from the reply's first token on
        first.wait(30)
        while not stop.is_set():
            with eng.lead_gate.work():
                entered.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=decoder)
    t.start()
    done = threading.Event()
    eng.add_request(list(range(5, 20)), SamplingParams(max_tokens=LEAD_TOKENS + 4, temperature=0.0, ignore_eos=True),
                    sink=lambda d, final: sink(d, final) if final is None else done.set())
    eng.ensure_worker()
    assert done.wait(30)
    stop.set()
    t.join(5)
    eng.close()
    assert len(emitted) == LEAD_TOKENS + 4 and entered
    assert min(entered) > emitted[LEAD_TOKENS - 1]  # not one part between the 1st and the 8th token


@pytest.mark.parametrize("weight_format", ["fp32", "int8"])
def test_a_reply_is_the_same_whether_its_first_tokens_borrow_the_cores(tmp_path, weight_format):
    led = _lead_engine(tmp_path, weight_format=weight_format)
    plain = LLMEngine.from_pretrained(tmp_path, num_blocks=64, block_size=8, weight_format=weight_format)
    prompt = list(range(7, 40))
    ids = [_greedy(e, prompt, 16).token_ids for e in (led, plain)]
    led.close()
    plain.close()
    assert ids[0] == ids[1]  # each output one thread's sum in a fixed order, at any thread count


def test_the_fake_llm_holds_the_lead_gate_until_its_first_tokens_are_out():
    from llm_engine import FakeLLM
    from parley.cores import LEAD_TOKENS

    llm = FakeLLM([" ".join(f"w{i}" for i in range(LEAD_TOKENS + 3))], ttft_s=0.0, token_s=0.001)
    llm.lead_gate, llm.lead_threads = CoreGate(), 2
    held, done = [], threading.Event()
    llm.add_request("hi", sink=lambda _d, final: done.set() if final is not None else held.append(llm.lead_gate.held))
    assert done.wait(10)
    assert held == [True] * LEAD_TOKENS + [False] * 3 and not llm.lead_gate.held


@pytest.mark.integration
def test_the_whisper_decoder_waits_for_the_gate_before_each_part_of_a_decode():
    from stt import TranscriberConfig, WhisperDecoder
    from tests.speech import piper_speech

    class Counting(CoreGate):
        def __init__(self):
            super().__init__(max_wait_s=10.0)
            self.parts = 0

        def work(self, expect_hold_s=0.0):
            self.parts += 1
            return super().work(expect_hold_s)

    decoder = WhisperDecoder(TranscriberConfig())
    decoder.core_gate = gate = Counting()
    speech = piper_speech("Turn the kitchen lights off, please.")
    release = threading.Event()
    t = _held_elsewhere(gate, release)
    threading.Timer(0.4, release.set).start()
    t0 = time.perf_counter()
    words, _ = decoder.decode(speech)
    t.join()
    assert time.perf_counter() - t0 >= 0.35 and words  # it waited for the hold, then decoded
    assert gate.parts == 3  # the encoder, the generate, the word alignment


@pytest.mark.integration
def test_after_a_preflight_the_alignment_waits_for_the_replys_first_tokens():
    from stt import TranscriberConfig, WhisperDecoder
    from tests.speech import piper_speech

    decoder = WhisperDecoder(TranscriberConfig())
    decoder.core_gate, decoder.lead_expect_s = CoreGate(max_wait_s=5.0), 2.0
    marks = {}
    align = decoder.model.find_alignment
    decoder.model.find_alignment = lambda *a, **kw: marks.setdefault("aligned", time.perf_counter()) and align(*a, **kw)

    def reply():  # the engine's lead, which the preflight asks for by way of the event loop
        time.sleep(0.1)
        with decoder.core_gate.hold_if_idle() as held:
            marks["held"] = held
            time.sleep(0.2)
        marks["released"] = time.perf_counter()

    def on_text(_words):
        threading.Thread(target=reply).start()

    words, _ = decoder.decode(piper_speech("Turn the kitchen lights off, please."), on_text=on_text)
    assert words and marks["held"] and marks["aligned"] >= marks["released"]


@pytest.mark.integration
def test_a_session_on_our_engine_and_whisper_lets_the_replys_first_tokens_lead():
    from pipeline.components import load_components
    from pipeline.config import SessionConfig
    from turn_detection import FakeEndOfTurnDetector

    comps = load_components(SessionConfig(llm="fake", tts="fake", llm_lead_threads=2), detector=FakeEndOfTurnDetector())
    assert isinstance(comps.engine.lead_gate, CoreGate) and comps.engine.lead_gate is comps.decoder.core_gate
    assert comps.engine.lead_threads == 2 and comps.engine.lead_gate is comps.synthesizer.core_gate  # one gate
    assert comps.decoder.lead_expect_s > 0  # preemptive replies: asked at the preflight
    off = load_components(SessionConfig(llm="fake", tts="fake"), detector=FakeEndOfTurnDetector())  # the default
    assert off.engine.lead_gate is None and off.decoder.core_gate is None
