"""Load every embedded model for real and run it once (`parley models --check`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parley.assets import MODELS, EmbeddedModel
from parley.errors import ModelError

_SENTENCE = "The quick brown fox jumps over the lazy dog."


@dataclass(frozen=True)
class CheckResult:
    key: str
    ok: bool
    seconds: float
    detail: str


def _speech_16k() -> np.ndarray:
    from parley.audio import resample
    from tts.piper_voice import PiperVoiceModel

    voice = PiperVoiceModel.default()
    return resample(voice.synthesize(_SENTENCE), voice.sample_rate, 16_000)


def _check_whisper(model: EmbeddedModel) -> str:
    from faster_whisper import WhisperModel

    m = WhisperModel(str(model.path()), device="cpu", compute_type="int8", cpu_threads=1)
    segments, _ = m.transcribe(_speech_16k(), language="en", beam_size=1)
    text = " ".join(s.text.strip() for s in segments)  # the lazy generator runs here
    if "fox" not in text.lower():
        raise RuntimeError(f"transcript {text!r} misses the test sentence")
    return f"transcribed: {text!r}"


def _check_vad(model: EmbeddedModel) -> str:
    from turn_detection.vad import SileroVAD

    vad = SileroVAD(model.path())
    probs = vad.probabilities(_speech_16k())
    silence = vad.probabilities(np.zeros(16_000, dtype=np.float32))
    if probs.max() < 0.5 or silence.max() > 0.5:
        raise RuntimeError(f"speech max p={probs.max():.2f}, silence max p={silence.max():.2f}")
    return f"speech p_max={probs.max():.2f}, silence p_max={silence.max():.2f}"


def _check_piper(model: EmbeddedModel) -> str:
    from tts.piper_voice import PiperVoiceModel

    p = model.path()
    voice = PiperVoiceModel(p, f"{p}.json")
    audio = voice.synthesize(_SENTENCE)
    if len(audio) < voice.sample_rate or not np.isfinite(audio).all():
        raise RuntimeError(f"synthesized {len(audio)} samples")
    return f"{len(audio) / voice.sample_rate:.2f} s of audio at {voice.sample_rate} Hz"


def _check_llm(model: EmbeddedModel) -> str:
    from llm_engine import LLMEngine, SamplingParams

    engine = LLMEngine.from_pretrained(str(model.path()))
    out = engine.chat([[{"role": "user", "content": "Say hello."}]], SamplingParams(max_tokens=8, temperature=0.0))[0]
    if not out.token_ids:
        raise RuntimeError("generated no tokens")
    return f"{len(out.token_ids)} tokens: {out.text!r}"


CHECKS: dict[str, Callable[[EmbeddedModel], str]] = {
    "whisper-tiny.en": _check_whisper,
    "whisper-base": _check_whisper,
    "silero-vad": _check_vad,
    "piper-joe-medium": _check_piper,
    "smollm2-135m-instruct": _check_llm,
}


def check_model(key: str) -> CheckResult:
    model = MODELS[key]
    t0 = time.perf_counter()
    try:
        model.path()  # missing / truncated files are named before any loader runs
        detail, ok = CHECKS[key](model), True
    except ModelError as e:
        detail, ok = str(e), False
    except Exception as e:  # any loader failure is reported per model, by name
        detail, ok = f"{type(e).__name__}: {e}", False
    return CheckResult(key, ok, time.perf_counter() - t0, detail)
