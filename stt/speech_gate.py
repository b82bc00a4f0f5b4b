"""Silero VAD gating for the transcriber: keeps speech (plus a short pad each side) and drops
silence, so silence is never decoded.

The gate sees one continuous stream: 512-sample windows are counted from the first sample
ever fed, and neither a new turn nor dropped audio shifts them, so the probabilities of a VAD
run once for the whole session (`probs=` of `feed`) line up with the gate's windows. Without
them the gate scores windows itself with the Silero v6 onnx bundled with faster-whisper (its
graph carries h/c state across the rows of a batch, so windows are scored in order), loaded
on first use only."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence

import numpy as np

from parley.errors import AudioFormatError

CHUNK = 512  # samples per VAD decision at 16 kHz (32 ms)
CONTEXT = 64


def windows_completed(fed: int, n: int) -> int:
    """How many 512-sample windows `n` more samples complete after `fed` samples of the stream."""
    return (fed + n) // CHUNK - fed // CHUNK


def check_speech_probs(speech_probs: Sequence[float], fed: int, n: int) -> np.ndarray:
    """The probabilities a push of `n` samples (after `fed`) must carry: one per window it
    completes, each in [0, 1]. Raises AudioFormatError (a ValueError) otherwise."""
    expected = windows_completed(fed, n)
    try:
        p = np.asarray(speech_probs, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as e:
        raise AudioFormatError(f"speech_probs must be a sequence of floats: {e}") from e
    if len(p) != expected:
        raise AudioFormatError(
            f"speech_probs has {len(p)} values, but this push of {n} samples (16 kHz) completes {expected} "
            f"512-sample windows of the stream (window boundaries count from the first sample ever pushed)")
    if not (np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()):
        raise AudioFormatError("speech_probs must be finite probabilities in [0, 1]")
    return p


class SpeechGate:
    """feed() audio in any sizes; returns the kept (buffer) audio. Not thread-safe."""

    def __init__(self, threshold: float = 0.5, neg_threshold: float = 0.35, pad_s: float = 0.2,
                 threads: int = 1) -> None:
        self.threshold, self.neg_threshold = threshold, neg_threshold
        self._threads = threads
        self._session = None  # the onnx session, made when a window has no given probability
        self._pad_chunks = max(0, round(pad_s * 16_000 / CHUNK))
        self._h = np.zeros((1, 1, 128), np.float32)
        self._c = np.zeros((1, 1, 128), np.float32)
        self._context = np.zeros(CONTEXT, np.float32)
        self._rest = np.zeros(0, np.float32)  # the start of the current, unfinished window
        self.fed = 0  # samples fed since the gate was made (all turns)
        self.kept_speech_upto = -1  # last feed: kept samples through its last speech chunk (-1: none)
        self.in_speech = False
        self.new_turn()

    def new_turn(self) -> None:
        """Forget the turn's speech (pads, silence count); keep the stream's window alignment
        and the model's state, as a VAD running for the whole session does."""
        self._preroll: deque[np.ndarray] = deque(maxlen=max(1, self._pad_chunks))
        self._trailing = 0  # pad chunks still to keep after the last speech
        self.speech_seen = False
        self.silence_s = 0.0  # since the last speech chunk (0 while speaking)

    @property
    def model_loaded(self) -> bool:
        return self._session is not None

    @property
    def pending_samples(self) -> int:
        """Samples fed but not yet scored (less than one 32 ms chunk)."""
        return len(self._rest)

    def _load(self):
        import onnxruntime
        from faster_whisper.utils import get_assets_path

        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = self._threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 4
        return onnxruntime.InferenceSession(
            os.path.join(get_assets_path(), "silero_vad_v6.onnx"), providers=["CPUExecutionProvider"],
            sess_options=opts)

    def _probs(self, chunks: np.ndarray) -> np.ndarray:  # chunks [B, 512] -> [B]
        if self._session is None:
            self._session = self._load()
        ctx = np.concatenate([self._context[None], chunks[:-1, -CONTEXT:]], axis=0)  # [B, 64]
        self._context = chunks[-1, -CONTEXT:].copy()
        out, self._h, self._c = self._session.run(
            None, {"input": np.concatenate([ctx, chunks], axis=1), "h": self._h, "c": self._c})
        return np.asarray(out, np.float32).reshape(-1)

    def feed(self, samples: np.ndarray, probs: Sequence[float] | None = None, keep: bool = True) -> list[np.ndarray]:
        """samples [N] float32 16 kHz -> the pieces to append to the utterance buffer, in order.
        `probs`: one speech probability per window this feed completes (else the gate's own
        model scores them). keep=False: audio dropped from the turn, fed only so the windows
        (and the model's state) stay aligned with the stream."""
        p_given = None if probs is None else check_speech_probs(probs, self.fed, len(samples))
        self.fed += len(samples)
        self.kept_speech_upto = -1
        x = np.concatenate([self._rest, samples]) if len(self._rest) else samples
        n = len(x) // CHUNK * CHUNK
        self._rest = x[n:].copy()
        if n == 0:
            return []
        chunks = x[:n].reshape(-1, CHUNK)  # [B, 512]
        if p_given is None:
            p_given = self._probs(chunks)
        elif len(chunks):
            self._context = chunks[-1, -CONTEXT:].copy()  # continuity if own scoring resumes
        if not keep:
            for p in p_given:
                self.in_speech = bool(p >= self.threshold or (self.in_speech and p >= self.neg_threshold))
            return []
        return self._gate(chunks, p_given)

    def _gate(self, chunks: np.ndarray, probs: np.ndarray) -> list[np.ndarray]:
        kept: list[np.ndarray] = []
        for chunk, p in zip(chunks, probs):
            if p >= self.threshold or (self.in_speech and p >= self.neg_threshold):
                self.in_speech = self.speech_seen = True
                self.silence_s = 0.0
                kept.extend(self._preroll)
                self._preroll.clear()
                kept.append(chunk)
                self.kept_speech_upto = CHUNK * len(kept)
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
