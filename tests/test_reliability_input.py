"""Bad input at the session's and the TTS's edges: 0 samples, 10 minutes in one frame, NaN/inf,
wrong rates and dtypes are refused with AudioFormatError and the session still answers; 100 KB
of text to the TTS streams in bounded chunks and stops at once when cancelled."""

from __future__ import annotations

import time

import numpy as np
import pytest

from llm_engine import FakeLLM
from parley.errors import AudioFormatError
from tests.speech import piper_speech, with_silence
from tests.test_pipeline_session import fake_components, fake_config
from tests.voice_harness import play, start, wait_for
from tts import FakeSynthesizer
from tts.stream import StreamConfig

pytestmark = [pytest.mark.integration]


async def test_bad_frames_at_the_session_edge_are_refused_and_it_still_answers():
    from pipeline.budget import ResponsePolicy

    cfg = fake_config(preemptive=False, response=ResponsePolicy(ack_enabled=False))
    vs, run = await start(cfg, fake_components(cfg, FakeLLM(["Still here."], ttft_s=0.02)))
    try:
        bad = [np.zeros(0, np.int16), np.zeros(16_000 * 600, np.int16),  # 0 samples; 10 minutes
               np.full(320, np.inf, np.float32), np.full(320, np.nan, np.float32), np.zeros(320, np.complex64),
               np.zeros((320, 3, 2), np.int16), np.array(["x"] * 320)]
        for frame in bad:
            with pytest.raises(AudioFormatError):
                vs.push_audio(frame, 16_000)
        for rate in (0, -16_000, 7, 10**7):
            with pytest.raises(AudioFormatError):
                vs.push_audio(np.zeros(320, np.int16), rate)
        await play(vs, run, with_silence(piper_speech("What is the weather like today?"), 0.3, 0.2))
        assert await wait_for(run, lambda: run.of("reply"), 5), run.events[-5:]
    finally:
        await vs.aclose()
    assert run.of("reply")[0]["text"] == "Still here."


def test_100_kb_of_text_to_the_tts_streams_in_bounded_chunks_and_cancels_at_once():
    synth = FakeSynthesizer(first_audio_delay_s=0.0, rtf=0.0)
    text = ("This is a very long reply that goes on. " * 2600)[:100_000]
    stream = synth.stream(StreamConfig(sample_rate=24_000))
    t0 = time.monotonic()
    stream.say(text)
    frames = [stream.read(timeout=5) for _ in range(50)]
    assert all(f is not None for f in frames) and time.monotonic() - t0 < 5
    stream.cancel()
    assert stream.read(timeout=1) is None  # nothing after cancel
    stream.join(5)
    assert max(len(t) for t in synth.texts) <= 300  # the chunker's cap, not one 100 KB call
