"""Streaming text-to-speech: chunker -> normalizer -> Piper (or espeak-ng) -> 20 ms PCM frames."""

from tts.chunker import ChunkerConfig, TextChunker, sentence_end, split_text
from tts.espeak_synthesizer import EspeakSynthesizer
from tts.fake_synthesizer import FakeSynthesizer
from tts.normalize import normalize_text
from tts.piper_synthesizer import PiperSynthesizer
from tts.piper_voice import PiperOptions, PiperVoiceModel
from tts.stream import ChunkTiming, SpeechFrame, SpeechStream, StreamConfig, StreamMetrics
from tts.synthesizer import Synthesis, SynthesisError, SynthesisMetrics, Synthesizer

__all__ = [
    "ChunkTiming", "ChunkerConfig", "EspeakSynthesizer", "FakeSynthesizer", "PiperOptions",
    "PiperSynthesizer", "PiperVoiceModel", "SpeechFrame", "SpeechStream", "StreamConfig",
    "StreamMetrics", "Synthesis", "SynthesisError", "SynthesisMetrics", "Synthesizer", "TextChunker",
    "create_synthesizer", "normalize_text", "sentence_end", "split_text",
]


def create_synthesizer(backend: str = "piper", *, threads: int = 1) -> Synthesizer:
    """"piper" (default, the embedded voice) or "espeak" (fallback) or "fake"."""
    if backend == "piper":
        return PiperSynthesizer.default(threads=threads)
    if backend == "espeak":
        return EspeakSynthesizer()
    if backend == "fake":
        return FakeSynthesizer()
    raise ValueError(f"unknown TTS backend {backend!r} (piper, espeak, fake)")
