"""One-shot transcription of a whole buffer (no streaming): the reference other stages use."""

from __future__ import annotations

import time

import numpy as np

from parley.audio import validate_audio
from stt.config import TranscriberConfig
from stt.decoder import SAMPLE_RATE, WhisperDecoder
from stt.events import Transcript, Word, append_word, join_words

_MAX_SHORT_S = 28.0


def transcribe(audio: np.ndarray, sample_rate: int = SAMPLE_RATE, model: str = "whisper-tiny.en", *,
               decoder: WhisperDecoder | None = None, prompt: str = "") -> Transcript:
    """Transcribe `audio` ([N] or [N, C], any accepted rate). Up to 28 s: one short-window
    decode; longer: faster-whisper's own 30 s seeking with its Silero VAD filter."""
    x = validate_audio(audio, sample_rate)
    dec = decoder or WhisperDecoder(TranscriberConfig(model=model))
    t0 = time.perf_counter()
    duration = len(x) / SAMPLE_RATE
    if duration <= _MAX_SHORT_S:
        words, _ = dec.decode(x, prompt, dec.config.final_beam_size)
    else:
        segments, _info = dec.model.transcribe(x, language=dec.config.language, beam_size=dec.config.final_beam_size,
                                               word_timestamps=True, vad_filter=True,
                                               initial_prompt=prompt or None)
        # faster-whisper's segments are lazy: the decode happens while iterating here
        words: list[Word] = []
        for seg in segments:
            for w in seg.words or []:
                append_word(words, w.word, w.start, w.end, w.probability)
    return Transcript(text=join_words(words), words=tuple(words), duration_s=duration,
                      decode_s=time.perf_counter() - t0, model=dec.config.model, language=dec.config.language)
