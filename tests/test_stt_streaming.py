"""Streaming STT on synthesized speech: WER against offline faster-whisper, interim
monotonicity, silence, bad input, format conversion; plus the fake and the CLI."""

from __future__ import annotations

import itertools
import re

import jiwer
import numpy as np
import pytest

from parley.wav import write_wav
from stt import FakeTranscriber, StreamingTranscriber, TranscriberConfig, replay, transcribe
from tests.speech import espeak_available, espeak_speech, piper_speech, with_silence

PIPER_TEXTS = (
    "Could you book a table for two people at the Italian place tonight?",
    "The weather tomorrow will be sunny in the morning and rainy in the afternoon.",
    "I would like to change my flight to Wednesday because my meeting moved.",
    "Remind me to call my sister when I get home from work.",
    "What time does the pharmacy on Main Street close on Sundays?",
    "Send a message to Alex saying that I will be ten minutes late.",
    "Can you play some relaxing music while I cook dinner?",
)
ESPEAK_TEXTS = ("Please turn off the lights in the kitchen and lock the front door.",)


def _norm(s: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", s.lower()).split())


def _wer(refs: list[str], hyps: list[str]) -> float:
    return 100.0 * jiwer.wer([_norm(r) for r in refs], [_norm(h) or "<empty>" for h in hyps])


def _clips() -> list[tuple[str, np.ndarray]]:
    clips = [(t, with_silence(piper_speech(t), 0.4, 0.8)) for t in PIPER_TEXTS]
    if espeak_available():
        clips += [(t, with_silence(espeak_speech(t), 0.4, 0.8)) for t in ESPEAK_TEXTS]
    return clips


@pytest.fixture(scope="module")
def transcriber():
    st = StreamingTranscriber(TranscriberConfig())
    yield st
    st.close()


@pytest.fixture(scope="module")
def streamed(transcriber):
    return [(text, replay(transcriber, audio, realtime=False)) for text, audio in _clips()]


@pytest.mark.integration
@pytest.mark.slow
def test_streaming_wer_within_two_points_of_offline(streamed, transcriber):
    from faster_whisper import WhisperModel

    from parley.assets import model_path

    reference = WhisperModel(str(model_path("whisper-tiny.en")), device="cpu", compute_type="int8", cpu_threads=1)
    offline = []
    for _text, audio in _clips():
        segments, _ = reference.transcribe(audio, language="en")
        offline.append(" ".join(s.text for s in segments))  # consumes the lazy generator
    refs = [t for t, _ in streamed]
    wer_stream = _wer(refs, [r.final.text for _, r in streamed])
    wer_offline = _wer(refs, offline)
    assert wer_stream <= wer_offline + 2.0, (wer_stream, wer_offline, [r.final.text for _, r in streamed])
    assert wer_stream < 20.0


@pytest.mark.integration
@pytest.mark.slow
def test_interims_are_monotone_prefix_extensions(streamed):
    for (_text, r), (_, audio) in zip(streamed, _clips()):
        assert len(r.events) >= 3, "a 3-5 s utterance should give several interims"
        stable = ""
        for e in r.events:
            assert e.kind in ("interim", "preflight")
            assert e.stable_text.startswith(stable), (stable, e.stable_text)
            assert e.text.startswith(e.stable_text)
            stable = e.stable_text
        assert r.final.text.startswith(stable)
        assert r.final.kind == "final"
        words = r.final.words
        # word times come from different decodes' alignments: in order to within 0.1 s
        assert all(b.start >= a.start - 0.1 for a, b in itertools.pairwise(words))
        # stream time runs on across turns: the clip spans [audio_time_s - its length, audio_time_s]
        t0 = r.final.audio_time_s - len(audio) / 16_000
        assert all(t0 - 0.05 <= w.start <= w.end <= r.final.audio_time_s + 0.05 for w in words)


@pytest.mark.integration
def test_preflight_when_speech_pauses(streamed):
    kinds = [[e.kind for e in r.events] for _, r in streamed]
    assert sum("preflight" in k for k in kinds) >= len(kinds) - 1, kinds
    for _, r in streamed:
        pre = [e for e in r.events if e.kind == "preflight"]
        if pre:
            assert pre[-1].text == pre[-1].stable_text


# A pause, then a short last stretch: decoded alone and prompted with the stable text, tiny.en
# looped on it ("... $5.20. Including tax. Including tax."); and words said twice on purpose
# (the last: a decode at the buffer's end said the question twice more, in 0 s words).
PAUSE_TEXTS = ("The total comes to $5.20, including tax.", "No, no. I said Tuesday, not Thursday.",
               "Yes. Yes, that is right. Go ahead.", "Hello? Hello, is anyone there?")


def _check_each_word_once(text: str, final, clip_s: float) -> None:
    ref, hyp = _norm(text).split(), _norm(final.text).split()
    assert all(hyp.count(w) == ref.count(w) for w in ref if w.isalpha()), (text, final.text)
    words = final.words
    assert all(b.start >= a.start - 0.1 for a, b in itertools.pairwise(words))
    t0 = final.audio_time_s - clip_s
    assert all(t0 - 0.05 <= w.start <= w.end <= final.audio_time_s + 0.05 for w in words)


@pytest.mark.integration
def test_no_word_repeated_or_dropped_where_speech_pauses(transcriber):
    for i, text in enumerate(PAUSE_TEXTS):
        audio = with_silence(piper_speech(text), 0.3, 0.8)
        transcriber.reset()
        r = replay(transcriber, audio, realtime=i == 0)  # the first also paced like a microphone
        _check_each_word_once(text, r.final, len(audio) / 16_000)
        stable = ""
        for e in r.events:
            assert e.stable_text.startswith(stable) and e.text.startswith(e.stable_text)
            stable = e.stable_text
        assert r.final.text.startswith(stable)
        if i == 0:
            transcriber.reset()
            _check_each_word_once(text, replay(transcriber, audio, realtime=False).final, len(audio) / 16_000)


@pytest.mark.integration
def test_flush_on_silence_gives_empty_final(transcriber):
    rng = np.random.default_rng(0)
    transcriber.reset()
    transcriber.push(np.zeros(16_000 * 2, np.float32))
    transcriber.push((rng.standard_normal(16_000) * 1e-3).astype(np.float32))
    final = transcriber.flush(timeout=30)
    assert final.kind == "final" and final.text == "" and final.words == ()
    assert final.decode_s == 0.0  # silence was never decoded


@pytest.mark.integration
@pytest.mark.parametrize("bad", [np.array([0.1, np.nan], np.float32), np.array([np.inf] * 10, np.float32),
                                 np.zeros(0, np.float32)])
def test_bad_input_raises_value_error(transcriber, bad):
    with pytest.raises(ValueError):
        transcriber.push(bad)
    with pytest.raises(ValueError):
        transcribe(bad)


@pytest.mark.integration
def test_44k_stereo_is_converted_and_transcribed(transcriber):
    text = PIPER_TEXTS[0]
    mono = with_silence(piper_speech(text, rate=44_100), 0.3, 0.8, rate=44_100)
    stereo = np.stack([mono, mono * 0.8], axis=1)  # [N, 2]
    assert _wer([text], [transcribe(stereo, 44_100).text]) < 25
    transcriber.reset()
    assert _wer([text], [replay(transcriber, stereo, 44_100, realtime=False).final.text]) < 25


@pytest.mark.integration
def test_reset_drops_the_turn_and_prompt_is_accepted(transcriber):
    transcriber.reset()
    transcriber.push(piper_speech(PIPER_TEXTS[3]))
    transcriber.reset()
    transcriber.set_prompt("We talked about dinner plans.")
    r = replay(transcriber, with_silence(piper_speech(PIPER_TEXTS[1]), 0.3, 0.6), realtime=False)
    assert "sister" not in r.final.text.lower()
    assert _wer([PIPER_TEXTS[1]], [r.final.text]) < 25
    transcriber.set_prompt("")


@pytest.mark.integration
@pytest.mark.slow
def test_segment_longer_than_30_s(transcriber):
    texts = PIPER_TEXTS * 3
    audio = np.concatenate([with_silence(piper_speech(t), 0.0, 0.05) for t in texts])
    assert len(audio) / 16_000 > 30
    transcriber.reset()
    r = replay(transcriber, with_silence(audio, 0.2, 0.8), realtime=False)
    assert _wer([" ".join(texts)], [r.final.text]) < 25
    assert _wer([" ".join(texts)], [transcribe(audio).text]) < 25


@pytest.mark.unit
async def test_fake_transcriber_events_and_async_flush():
    fake = FakeTranscriber(["turn one is here", "second"], words_per_s=10, final_delay_s=0.01)
    evs = fake.push(np.full(16_000, 0.1, np.float32))
    assert [e.kind for e in evs] == ["preflight"] and evs[0].text == "turn one is here"
    final = await fake.aflush()
    assert final.kind == "final" and final.text == "turn one is here" and final.latency_s >= 0.01
    fake.push(np.zeros(1600, np.float32))
    assert fake.flush().text == ""
    with pytest.raises(ValueError):
        fake.push(np.array([np.nan], np.float32))


@pytest.mark.integration
def test_cli_transcribe(tmp_path, capsys):
    from pipeline.cli import main

    path = write_wav(tmp_path / "a.wav", with_silence(piper_speech(PIPER_TEXTS[2]), 0.3, 0.8), 16_000)
    assert main(["transcribe", str(path)]) == 0
    assert _wer([PIPER_TEXTS[2]], [capsys.readouterr().out]) < 25
    assert main(["transcribe", str(path), "--stream", "--fast"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("final") and any(line.startswith("interim") for line in out)
