"""EndOfTurnDetector: Silero VAD + prosodic end-of-turn classifier + endpointing policy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from parley.audio import ENGINE_RATE, validate_audio
from turn_detection.classifier import DEFAULT_WEIGHTS, ProsodyClassifier
from turn_detection.completeness import DEFAULT_TEXT_WEIGHTS, CompletenessScorer
from turn_detection.policy import DEFAULT_POLICY, EndpointingPolicy
from turn_detection.vad import WINDOW, WINDOW_S, SileroVAD, VADConfig

if TYPE_CHECKING:
    from turn_detection.acoustic import AcousticClassifier


@dataclass(frozen=True)
class EndOfTurn:
    time_s: float  # stream time (end of the pushed audio) when the detector decided
    probability: float  # P(turn finished) behind the decision


@dataclass(frozen=True)
class Evaluation:
    """One P(finished) of a pause (kept for tests, training and diagnostics): the classifier
    runs once per pause; P is re-derived when a transcript arrives during the pause."""

    time_s: float
    speech_end_s: float
    features: np.ndarray  # [F] the audio witness's (prosodic or acoustic) features
    probability: float  # the combined P the policy saw
    audio_probability: float = float("nan")  # the audio witness's P
    text_probability: float | None = None  # the text scorer's P (None: no transcript / scorer)


class EndOfTurnDetector:
    def __init__(self, vad: SileroVAD, classifier: ProsodyClassifier | AcousticClassifier | None,
                 policy: EndpointingPolicy | None = None, text_scorer: CompletenessScorer | None = None):
        self.vad, self.classifier, self.text_scorer = vad, classifier, text_scorer
        self.policy = policy or EndpointingPolicy()

    @classmethod
    def load(cls, weights: str | Path = DEFAULT_WEIGHTS, policy: EndpointingPolicy | None = None,
             vad_path: str | Path | None = None, threads: int = 1,
             text_weights: str | Path | None = DEFAULT_TEXT_WEIGHTS) -> EndOfTurnDetector:
        """The embedded VAD, the shipped prosodic and text weights (text_weights=None: audio
        only) and the shipped policy (eot_policy.json, chosen by leave-one-family-out)."""
        policy = policy or EndpointingPolicy.load(DEFAULT_POLICY)
        text = CompletenessScorer.load(text_weights) if text_weights is not None else None
        return cls(SileroVAD(vad_path, threads=threads), ProsodyClassifier.load(weights), policy, text)

    def with_policy(self, policy: EndpointingPolicy) -> EndOfTurnDetector:
        """The same models under another policy (sharing them)."""
        return EndOfTurnDetector(self.vad, self.classifier, policy, self.text_scorer)

    def with_text_scorer(self, text_scorer, policy: EndpointingPolicy) -> EndOfTurnDetector:
        """The same audio models with another text witness (anything with probability(text))
        and the policy chosen for it."""
        return EndOfTurnDetector(self.vad, self.classifier, policy, text_scorer)

    def stream(self) -> EndOfTurnStream:
        return EndOfTurnStream(self)


def _checked_probs(speech_probs: Sequence[float], n: int) -> np.ndarray:
    try:
        probs = np.asarray(speech_probs, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise ValueError(f"speech_probs must be a sequence of numbers: {e}") from e
    if len(probs) != n:
        raise ValueError(f"speech_probs has {len(probs)} values, this push completes {n} windows of {WINDOW} samples")
    if not np.all((probs >= 0.0) & (probs <= 1.0)):  # also rejects NaN
        raise ValueError("speech_probs must lie in [0, 1]")
    return probs


class EndOfTurnStream:
    """Push 16 kHz mono float32 frames of any length; returns EndOfTurn once per turn."""

    def __init__(self, detector: EndOfTurnDetector):
        self._det = detector
        self._vad = detector.vad.stream(VADConfig())
        # audio kept for the audio witness's features (its context, and the pause so far)
        self._keep = int(((detector.classifier or ProsodyClassifier).context_s + 2.0) * ENGINE_RATE)
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next frame starts a new turn at stream time 0."""
        self._vad.reset()
        self._audio = np.zeros(0, dtype=np.float32)
        self._audio_start = 0  # stream sample index of self._audio[0]
        self._pending = np.zeros(0, dtype=np.float32)
        self._pushed = 0  # samples pushed since reset
        self._text = ""
        self._new_turn()

    def _new_turn(self) -> None:
        self.evaluations: list[Evaluation] = []  # this turn's
        self._speaking = False
        self._speech_s = 0.0
        self._speech_end = 0.0  # stream time the last speech window ended
        self._features: np.ndarray | None = None  # of the current pause
        self._audio_p = 0.5  # classifier's P for those features
        self._probability: float | None = None
        self._prob_text: str | None = None  # transcript behind self._probability
        self._fired = False

    @property
    def silence_s(self) -> float | None:
        """Silence since the turn's speech stopped (None while speaking or before any speech)."""
        if self._speaking or self._speech_s == 0:
            return None
        return self._vad.time_s - self._speech_end

    @property
    def probability(self) -> float | None:
        """The current pause's P(finished), once evaluated."""
        return self._probability

    def push_transcript(self, text: str) -> None:
        """The turn's words so far (every interim / preflight text): P is re-derived from it
        and the prosodic P at the next window of a pause (policy.combine)."""
        if not isinstance(text, str):
            raise ValueError("transcript must be a str")
        self._text = text

    def push(self, frame: np.ndarray, speech_probs: Sequence[float] | None = None) -> EndOfTurn | None:
        """Push audio. `speech_probs`, when given, are the VAD speech probabilities of the
        512-sample windows this push completes (windows counted over the whole stream since
        reset(), so exactly (buffered + len(frame)) // 512 of them), used instead of running
        the VAD model: the session runs Silero once per window and shares it. A wrong count
        or a value outside [0, 1] raises ValueError and changes nothing."""
        x = validate_audio(frame, ENGINE_RATE, allow_empty=True)  # ValueError on NaN / bad dtype
        n = (len(self._pending) + len(x)) // WINDOW
        probs = None if speech_probs is None else _checked_probs(speech_probs, n)
        self._pushed += len(x)
        self._audio = np.concatenate([self._audio, x])
        if len(self._audio) > self._keep:
            self._audio_start += len(self._audio) - self._keep
            self._audio = self._audio[-self._keep :]
        buf = np.concatenate([self._pending, x])
        self._pending = buf[n * WINDOW :]
        event = None
        for i in range(n):
            p = None if probs is None else float(probs[i])
            event = self._window(buf[i * WINDOW : (i + 1) * WINDOW], p) or event
        return event

    def _window(self, window: np.ndarray, prob: float | None) -> EndOfTurn | None:
        vad = self._vad
        if prob is None:
            vad.push_window(window)
        else:
            vad.push_probability(prob)
        p, now = vad.last_probability, vad.time_s
        cfg = vad.config
        if p >= (cfg.off_threshold if self._speaking else cfg.threshold):
            if self._fired:  # speech after a decision: a new turn in the same stream
                self._new_turn()
            self._speaking = True
            self._speech_s += WINDOW_S
            self._speech_end = now
            self._features = self._probability = None
            return None
        self._speaking = False
        policy = self._det.policy
        if self._fired or self._speech_s < policy.min_speech_s:
            return None
        silence = now - self._speech_end
        if silence < policy.eval_silence_s:
            return None
        if (self._probability is None or self._prob_text != self._text) and not self._evaluate(now):
            return None  # the text witness is still scoring the newest words: hold the turn
        if policy.should_end(self._probability, silence):
            self._fired = True
            return EndOfTurn(time_s=self._pushed / ENGINE_RATE, probability=self._probability)
        return None

    def _evaluate(self, now: float) -> bool:
        """P from the audio witness and the newest words; False (nothing changed) while a
        non-blocking text scorer (one with `peek`, e.g. pipeline.turn_text.BackgroundScorer)
        is still scoring them: the decision waits for their P, as it does with a blocking
        scorer, but the caller's thread does not."""
        if self._features is None:  # the audio before the pause: computed once per pause
            end = int(self._speech_end * ENGINE_RATE) - self._audio_start
            clf = self._det.classifier
            self._features = (clf or ProsodyClassifier).features(self._audio, max(0, end))
            self._audio_p = clf.probability(self._features) if clf is not None else 0.5
        scorer = self._det.text_scorer
        text_p = None
        if scorer is not None and self._text.strip():
            peek = getattr(scorer, "peek", None)
            text_p = scorer.probability(self._text) if peek is None else peek(self._text)
            if text_p is None:
                return False
        prob = self._det.policy.combine(self._audio_p, text_p)
        self._probability, self._prob_text = prob, self._text
        self.evaluations.append(Evaluation(now, self._speech_end, self._features, prob, self._audio_p, text_p))
        return True
