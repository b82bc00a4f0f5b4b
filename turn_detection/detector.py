"""EndOfTurnDetector: Silero VAD + prosodic end-of-turn classifier + endpointing policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE, validate_audio
from turn_detection.classifier import DEFAULT_WEIGHTS, ProsodyClassifier
from turn_detection.policy import EndpointingPolicy
from turn_detection.prosody import CONTEXT_S, prosodic_features
from turn_detection.text_cues import text_unfinished
from turn_detection.vad import WINDOW, WINDOW_S, SileroVAD, VADConfig

PAUSE_S = 0.15  # a silence this long inside the turn counts as a pause (feature)
_KEEP = int((CONTEXT_S + 2.0) * ENGINE_RATE)  # audio kept for the features


@dataclass(frozen=True)
class EndOfTurn:
    time_s: float  # stream time (end of the pushed audio) when the detector decided
    probability: float  # P(turn finished) behind the decision


@dataclass(frozen=True)
class Evaluation:
    """One classifier call at a pause (kept for tests, training and diagnostics)."""

    time_s: float
    speech_end_s: float
    features: np.ndarray  # [len(FEATURE_NAMES)]
    probability: float


class EndOfTurnDetector:
    def __init__(self, vad: SileroVAD, classifier: ProsodyClassifier | None,
                 policy: EndpointingPolicy | None = None):
        self.vad, self.classifier = vad, classifier
        self.policy = policy or EndpointingPolicy()

    @classmethod
    def load(cls, weights: str | Path = DEFAULT_WEIGHTS, policy: EndpointingPolicy | None = None,
             vad_path: str | Path | None = None, threads: int = 1) -> EndOfTurnDetector:
        """The embedded VAD, the shipped weights and the default policy."""
        return cls(SileroVAD(vad_path, threads=threads), ProsodyClassifier.load(weights), policy)

    def stream(self) -> EndOfTurnStream:
        return EndOfTurnStream(self)


class EndOfTurnStream:
    """Push 16 kHz mono float32 frames of any length; returns EndOfTurn once per turn."""

    def __init__(self, detector: EndOfTurnDetector):
        self._det = detector
        self._vad = detector.vad.stream(VADConfig())
        self.evaluations: list[Evaluation] = []
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next frame starts a new turn at stream time 0."""
        self._vad.reset()
        self._audio = np.zeros(0, dtype=np.float32)
        self._audio_start = 0  # stream sample index of self._audio[0]
        self._pending = np.zeros(0, dtype=np.float32)
        self._pushed = 0  # samples pushed since reset
        self._text = ""
        self.evaluations = []
        self._new_turn()

    def _new_turn(self) -> None:
        self._speaking = False
        self._speech_s = 0.0
        self._pauses = 0
        self._last_pause_end = 0.0
        self._speech_end = 0.0  # stream time the last speech window ended
        self._probability: float | None = None
        self._wait = self._det.policy.max_wait_s
        self._fired = False

    def push_transcript(self, text: str) -> None:
        """Optional interim transcript of the current turn."""
        if not isinstance(text, str):
            raise ValueError("transcript must be a str")
        self._text = text

    def push(self, frame: np.ndarray) -> EndOfTurn | None:
        x = validate_audio(frame, ENGINE_RATE, allow_empty=True)  # ValueError on NaN / bad dtype
        self._pushed += len(x)
        self._audio = np.concatenate([self._audio, x])
        if len(self._audio) > _KEEP:
            self._audio_start += len(self._audio) - _KEEP
            self._audio = self._audio[-_KEEP:]
        buf = np.concatenate([self._pending, x])
        n = len(buf) // WINDOW
        self._pending = buf[n * WINDOW :]
        event = None
        for i in range(n):
            event = self._window(buf[i * WINDOW : (i + 1) * WINDOW]) or event
        return event

    def _window(self, window: np.ndarray) -> EndOfTurn | None:
        vad = self._vad
        vad.push_window(window)
        p, now = vad.last_probability, vad.time_s
        cfg = vad.config
        if p >= (cfg.off_threshold if self._speaking else cfg.threshold):
            if self._fired:  # speech after a decision: a new turn in the same stream
                self._new_turn()
            elif not self._speaking and self._speech_s > 0 and now - WINDOW_S - self._speech_end >= PAUSE_S:
                self._pauses += 1
                self._last_pause_end = now - WINDOW_S
            self._speaking = True
            self._speech_s += WINDOW_S
            self._speech_end = now
            self._probability = None
            return None
        self._speaking = False
        if self._fired or self._speech_s < self._det.policy.min_speech_s:
            return None
        silence = now - self._speech_end
        policy = self._det.policy
        if self._probability is None and silence >= policy.eval_silence_s:
            self._evaluate(now)
        if self._probability is not None and silence >= self._wait:
            self._fired = True
            return EndOfTurn(time_s=self._pushed / ENGINE_RATE, probability=self._probability)
        return None

    def _evaluate(self, now: float) -> None:
        end = int(self._speech_end * ENGINE_RATE) - self._audio_start
        audio = self._audio[max(0, end - int(CONTEXT_S * ENGINE_RATE)) : max(0, end)]
        feats = prosodic_features(audio, self._speech_s, self._pauses, self._speech_end - self._last_pause_end)
        clf = self._det.classifier
        prob = clf.probability(feats) if clf is not None else 0.5
        if self._text and text_unfinished(self._text):
            prob *= self._det.policy.text_penalty
        self._probability = prob
        self._wait = self._det.policy.wait_s(prob)
        self.evaluations.append(Evaluation(now, self._speech_end, feats, prob))
