"""One Whisper decode of a short buffer on faster-whisper's CTranslate2 model, with a window
shorter than Whisper's 30 s and word timestamps. Not thread-safe: one caller thread at a time."""

from __future__ import annotations

import time

import numpy as np

from parley.errors import ModelError
from stt.config import TranscriberConfig
from stt.events import Word, append_word

SAMPLE_RATE = 16_000
_FRAMES_PER_S = 100  # mel hop of 10 ms


def _device(config: TranscriberConfig) -> tuple[str, str]:
    import ctranslate2

    device = config.device
    if device == "auto":
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    compute = config.compute_type
    if compute == "auto":
        compute = "float16" if device == "cuda" else "int8"
    return device, compute


class WhisperDecoder:
    """Greedy (or beam) decode of up to `max_window_s` of audio; times relative to its start."""

    def __init__(self, config: TranscriberConfig) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        from parley.assets import model_path

        self.config = config
        self.device, self.compute_type = _device(config)
        path = model_path(config.model)
        try:
            self.model = WhisperModel(str(path), device=self.device, compute_type=self.compute_type,
                                      cpu_threads=config.cpu_threads, num_workers=1)
        except (RuntimeError, ValueError, OSError) as e:
            raise ModelError(config.model, f"CTranslate2 could not load {path}: {e}") from e
        lang = config.language if self.model.model.is_multilingual else None
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual,
                                   task="transcribe", language=lang)
        self._suppress = list(get_suppressed_tokens(self.tokenizer, [-1]))

    def window_frames(self, n_samples: int) -> int:
        c = self.config
        audio_s = n_samples / SAMPLE_RATE
        window_s = min(30.0, max(c.min_window_s, audio_s + c.window_margin_s))
        return round(window_s * _FRAMES_PER_S)

    def decode(self, audio: np.ndarray, prompt: str = "", beam_size: int | None = None) -> tuple[list[Word], float]:
        """audio: [N] float32 16 kHz, N <= 30 s. Returns (words, seconds spent)."""
        t0 = time.perf_counter()
        if len(audio) < SAMPLE_RATE // 10:
            return [], 0.0
        from faster_whisper.audio import pad_or_trim

        m = self.model
        features = m.feature_extractor(audio)  # [80, T]
        content_frames = min(features.shape[-1] - 1, 3000)
        window = self.window_frames(len(audio))
        enc = m.encode(pad_or_trim(features[:, :content_frames], window))  # [1, window/2, D]
        # the newest ~120 prompt tokens: context enough, and room left in the 448-token limit
        previous = self.tokenizer.encode(" " + prompt.strip())[-120:] if prompt.strip() else []
        prompt_ids = m.get_prompt(self.tokenizer, previous, without_timestamps=True)
        res = m.model.generate(enc, [prompt_ids], beam_size=beam_size or self.config.beam_size, max_length=448,
                               return_scores=True, return_no_speech_prob=True,
                               suppress_blank=True, suppress_tokens=self._suppress)[0]
        tokens = [t for t in res.sequences_ids[0] if t < self.tokenizer.eot]
        avg_logprob = res.scores[0] * len(tokens) / (len(tokens) + 1) if tokens else -10.0
        if not tokens or (res.no_speech_prob > self.config.no_speech_threshold and avg_logprob < -1.0):
            return [], time.perf_counter() - t0
        aligned = m.find_alignment(self.tokenizer, [tokens], enc, content_frames)[0]
        end_s = len(audio) / SAMPLE_RATE
        words: list[Word] = []
        for w in aligned:
            append_word(words, w["word"], min(float(w["start"]), end_s), min(float(w["end"]), end_s),
                        float(w["probability"]))
        return _drop_repeat(words), time.perf_counter() - t0


def _drop_repeat(words: list[Word]) -> list[Word]:
    """Whisper's short-window failure: the last phrase said twice back to back (seen on a 2 s
    tail after a pause: "... on the way. And also to buy some milk on the way."). Drop it."""
    norms = [w.norm for w in words]
    for n in range(len(words) // 2, 2, -1):
        if norms[-2 * n:-n] == norms[-n:]:
            return words[:-n]
    return words
