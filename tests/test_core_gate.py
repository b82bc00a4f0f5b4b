"""parley.cores.CoreGate, and the two stages that share it: the engine thread waits while the
synthesizer holds it. Timings here are generous bounds on waits, not speed targets."""

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
        assert 0.09 <= short.wait() < 2.0  # a holder that never lets go does not starve the waiter


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
