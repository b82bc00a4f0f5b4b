"""Silero VAD gating for the transcriber: keeps speech (plus a short pad each side) and drops
silence, so silence is never decoded. Uses the Silero v6 onnx bundled with faster-whisper
(its ONNX graph carries h/c state across the rows of a batch, so chunks are scored in order)."""

from __future__ import annotations

import os
from collections import deque

import numpy as np

CHUNK = 512  # samples per VAD decision at 16 kHz (32 ms)
CONTEXT = 64


class SpeechGate:
    """feed() audio in any sizes; returns the kept (buffer) audio. Not thread-safe."""

    def __init__(self, threshold: float = 0.5, neg_threshold: float = 0.35, pad_s: float = 0.2,
                 threads: int = 1) -> None:
        import onnxruntime
        from faster_whisper.utils import get_assets_path

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(
            os.path.join(get_assets_path(), "silero_vad_v6.onnx"), providers=["CPUExecutionProvider"],
            sess_options=opts)
        self.threshold, self.neg_threshold = threshold, neg_threshold
        self._pad_chunks = max(0, round(pad_s * 16_000 / CHUNK))
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), np.float32)
        self._c = np.zeros((1, 1, 128), np.float32)
        self._context = np.zeros(CONTEXT, np.float32)
        self._rest = np.zeros(0, np.float32)
        self._preroll: deque[np.ndarray] = deque(maxlen=max(1, self._pad_chunks))
        self._trailing = 0  # pad chunks still to keep after the last speech
        self.in_speech = False
        self.speech_seen = False
        self.silence_s = 0.0  # since the last speech chunk (0 while speaking)

    @property
    def pending_samples(self) -> int:
        """Samples fed but not yet scored (less than one 32 ms chunk)."""
        return len(self._rest)

    def _probs(self, chunks: np.ndarray) -> np.ndarray:  # chunks [B, 512] -> [B]
        ctx = np.concatenate([self._context[None], chunks[:-1, -CONTEXT:]], axis=0)  # [B, 64]
        self._context = chunks[-1, -CONTEXT:].copy()
        out, self._h, self._c = self._session.run(
            None, {"input": np.concatenate([ctx, chunks], axis=1), "h": self._h, "c": self._c})
        return np.asarray(out, np.float32).reshape(-1)

    def feed(self, samples: np.ndarray) -> list[np.ndarray]:
        """samples [N] float32 16 kHz -> the pieces to append to the utterance buffer, in order."""
        x = np.concatenate([self._rest, samples]) if len(self._rest) else samples
        n = len(x) // CHUNK * CHUNK
        self._rest = x[n:].copy()
        if n == 0:
            return []
        chunks = x[:n].reshape(-1, CHUNK)  # [B, 512]
        kept: list[np.ndarray] = []
        for chunk, p in zip(chunks, self._probs(chunks)):
            if p >= self.threshold or (self.in_speech and p >= self.neg_threshold):
                self.in_speech = self.speech_seen = True
                self.silence_s = 0.0
                kept.extend(self._preroll)
                self._preroll.clear()
                kept.append(chunk)
                self._trailing = self._pad_chunks
                continue
            self.in_speech = False
            if self.speech_seen:
                self.silence_s += CHUNK / 16_000
            if self._trailing > 0:
                self._trailing -= 1
                kept.append(chunk)
            elif self._pad_chunks:
                self._preroll.append(chunk)
        return kept
