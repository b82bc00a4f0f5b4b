"""Intelligibility: the streamed speech of a fixed sentence set, transcribed by Whisper tiny.en."""

from __future__ import annotations

import functools
import re

import jiwer
import numpy as np
import pytest

import parley.assets
from parley.audio import int16_to_float
from tts import EspeakSynthesizer, PiperSynthesizer, normalize_text

# numbers, currency, percentages, decimals, times, ordinals and abbreviations
SENTENCES = (
    "Dr. Smith will see you at 7:30 tomorrow morning.",
    "The total comes to $5.20, including tax.",
    "About 45% of the 1,200 people voted yes.",
    "Pi is roughly 3.14, e.g. a little more than three.",
    "The meeting moved to March 3rd at 10:15 a.m.",
    "Mr. Jones finished 2nd out of 12 runners.",
    "Please call me back before 6 pm on Friday.",
    "It costs $19.99 and ships in 3 to 5 days.",
)


@functools.lru_cache(maxsize=1)
def _whisper():
    from faster_whisper import WhisperModel

    return WhisperModel(str(parley.assets.model_path("whisper-tiny.en")), device="cpu",
                        compute_type="int8", cpu_threads=1)


def _transcribe(audio: np.ndarray) -> str:
    """16 kHz float32 -> text with plain faster-whisper on the embedded tiny.en: this test measures
    the voice, not our STT (stt.transcribe gave WER 0.12-0.16 here: number formatting)."""
    segments, _ = _whisper().transcribe(audio, beam_size=1, language="en", condition_on_previous_text=False)
    return " ".join(s.text for s in segments)


def _spoken_words(text: str, reference: str = "") -> str:
    # Whisper writes "7:30" as "7.30": the same time, so the written forms are unified first.
    for h, mm in re.findall(r"\b(\d{1,2}):(\d{2})\b", reference):
        text = text.replace(f"{h}.{mm}", f"{h}:{mm}")
    text = normalize_text(text).lower().replace("-", " ")
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9' ]", " ", text)).strip()


def _streamed_audio(synth, text: str) -> np.ndarray:  # [N] float32 at 16 kHz
    frames = list(synth.stream(sample_rate=16_000).say(text))
    return int16_to_float(np.concatenate([f.pcm for f in frames]))


def _wer(synth, draws: int = 1) -> tuple[float, list[tuple[str, str]]]:
    """WER pooled over `draws` renderings of the set (Piper samples noise each time)."""
    refs, hyps = [], []
    for sentence in SENTENCES * draws:
        hyp = _transcribe(_streamed_audio(synth, sentence))
        refs.append(_spoken_words(sentence))
        hyps.append(_spoken_words(hyp, sentence))
    return jiwer.wer(refs, hyps), list(zip(refs, hyps))


@pytest.mark.integration
@pytest.mark.slow
def test_piper_streamed_speech_is_intelligible():
    # Piper's noise is unseeded: one rendering of the 8 sentences measured 3.3-7.6% in five
    # quiet runs and 10.9% once in CI (2026-12-04); three renderings pooled keep the 10% bar
    # without the luck of one draw
    wer, pairs = _wer(PiperSynthesizer.default(threads=1), draws=3)
    assert wer <= 0.10, pairs


@pytest.mark.integration
@pytest.mark.slow
def test_espeak_fallback_is_intelligible():
    # formant speech: Whisper mishears more of it (13% measured); a floor that still fails on noise
    wer, pairs = _wer(EspeakSynthesizer())
    assert wer <= 0.25, pairs


@pytest.mark.unit
def test_time_spellings_are_unified_only_for_times_in_the_reference():
    assert _spoken_words("at 7.30 today", "at 7:30 today") == "at seven thirty today"
    assert _spoken_words("pi is 3.14", "pi is 3.14") == "pi is three point one four"
