"""P(turn finished) from how the words before a pause sound, read by Whisper's encoder.

Our hand-made prosodic features (turn_detection.prosody: pitch, energy, durations) learned the
synthesizers they were trained on: on voices they never heard (flite, festival) they ranked
pauses against turn ends at chance. Whisper's encoder was trained on 680k hours of real speech,
so its states at the end of an utterance carry what a listener hears there (a final fall,
lengthening, a word that cannot end a sentence) more the same way across voices: a logistic
regression on them, fit without a family's synthesizer, ranks that family's inserted pauses
against its turn ends at AUC 0.90-0.98 (the prosodic model: 0.49-0.54 on flite and festival).
It is not the session's witness: leaving one family out, the policies chosen with it alone cut
off more of the held-out family; summed with the prosodic P it matched the shipped witness's
worst family (MODEL_CARD.md, ninth card). It stays as a training option,
`python -m turn_detection.training.loso --witness acoustic --pauses DIR ...`.

The encoder (the STT's whisper-tiny.en, our own CTranslate2 instance on `threads` threads) runs
once per pause on the utterance so far (at most CONTEXT_S, unpadded: the whole utterance lets
the final frames see the sentence's shape); the features are the mean encoder state over the
last POOL_S of speech and over the silence after it (~14 ms a pause, one thread, model 167)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE

ENCODER_MODEL = "whisper-tiny.en"
CONTEXT_S = 6.0  # audio before the evaluation that the encoder sees (3 s ranked worse)
POOL_S = 0.5  # the speech before the pause whose states are averaged
_FRAME_S = 0.02  # one encoder state per 20 ms (two 10 ms mel frames)
MIN_SPEECH_S = 0.1  # less audio than this gives no encoder state worth reading
WIDTH = 384  # whisper-tiny.en's encoder states


class WhisperEncoder:
    """Whisper's encoder alone: audio [N] at 16 kHz -> states [N / 320, D] (no padding)."""

    def __init__(self, model: str = ENCODER_MODEL, threads: int = 1) -> None:
        from faster_whisper import WhisperModel

        from parley.assets import model_path
        from parley.errors import ModelError

        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        path = model_path(model)
        try:
            self._model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=threads)
        except (RuntimeError, ValueError, OSError) as e:
            raise ModelError(model, f"CTranslate2 could not load {path}: {e}") from e
        self.name = model

    def states(self, audio: np.ndarray) -> np.ndarray:
        mel = self._model.feature_extractor(audio)[:, :-1]  # [80, T]: the last frame is padding
        frames = mel.shape[1] // 2 * 2
        if frames < 2:
            raise ValueError(f"{len(audio)} samples are too few to encode")
        return np.array(self._model.encode(np.ascontiguousarray(mel[:, :frames])))[0]  # [T / 2, D]


def encoder_features(states: np.ndarray, speech_end_s: float) -> np.ndarray:
    """states [T, D] of audio whose speech ended `speech_end_s` into it -> [2 D]: the mean
    state over the last POOL_S of speech, then over the silence after it."""
    end = int(np.clip(round(speech_end_s / _FRAME_S), 1, len(states) - 1))
    speech = states[max(0, end - round(POOL_S / _FRAME_S)) : end]
    return np.concatenate([speech.mean(axis=0), states[end:].mean(axis=0)]).astype(np.float32)


class AcousticClassifier:
    """Logistic regression on the standardized encoder features (`encoder_features`). The
    same `features(audio, speech_end)`, `logits`, `probability` as the prosodic classifier, so
    the detector and the training code take either."""

    context_s = CONTEXT_S

    def __init__(self, mean: np.ndarray, scale: np.ndarray, w: np.ndarray, b: float,
                 encoder: WhisperEncoder | None = None, model: str = ENCODER_MODEL) -> None:
        if mean.ndim != 1 or mean.shape != scale.shape or w.shape != mean.shape:
            raise ValueError(f"acoustic head shapes disagree: mean {mean.shape}, scale {scale.shape}, w {w.shape}")
        if not (np.all(np.isfinite(mean)) and np.all(scale > 0) and np.all(np.isfinite(w)) and np.isfinite(b)):
            raise ValueError("acoustic head weights must be finite, scales > 0")
        self.mean, self.scale, self.w, self.b = mean, scale, w, float(b)  # [F], [F], [F], scalar
        self.model, self._encoder = model, encoder

    @classmethod
    def extractor(cls, encoder: WhisperEncoder | None = None) -> AcousticClassifier:
        """A head that only extracts features (training reads them; its P is always 0.5)."""
        z = np.zeros(2 * WIDTH, np.float32)
        return cls(z, np.ones_like(z), z, 0.0, encoder)

    @property
    def encoder(self) -> WhisperEncoder:
        if self._encoder is None:  # loaded on first use: replaying stored features needs none
            self._encoder = WhisperEncoder(self.model)
        return self._encoder

    def features(self, audio: np.ndarray, speech_end: int) -> np.ndarray:
        """audio [N] up to now, its speech ending at sample `speech_end` -> [F]."""
        clip = audio[-int(CONTEXT_S * ENGINE_RATE):]
        end_s = (speech_end - (len(audio) - len(clip))) / ENGINE_RATE
        short = int(MIN_SPEECH_S * ENGINE_RATE) - len(clip)
        if short > 0:  # too little to encode: silence in front
            clip, end_s = np.concatenate([np.zeros(short, np.float32), clip]), end_s + short / ENGINE_RATE
        features = encoder_features(self.encoder.states(clip), end_s)
        if features.shape != self.mean.shape:
            raise ValueError(f"the acoustic head reads {self.mean.shape[0]} features of {self.model}; "
                             f"the encoder gave {features.shape[0]}")
        return features

    def logits(self, x: np.ndarray) -> np.ndarray:
        """x [N, F] -> [N]."""
        return ((x - self.mean) / self.scale) @ self.w + self.b

    def probability(self, features: np.ndarray) -> float:
        """features [F] -> P(finished)."""
        z = float(self.logits(features[None, :])[0])
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -30, 30))))

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, l2: float = 100.0, encoder: WhisperEncoder | None = None
            ) -> AcousticClassifier:
        """x [N, F], y [N] in {0, 1}: class-balanced logistic regression, L2 on the weights."""
        from turn_detection.training.train_text import logistic

        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        w, b = logistic((x - mean) / scale, y, l2)
        return cls(mean, scale, w, b, encoder)

    def save(self, path: str | Path) -> None:
        np.savez(path, mean=self.mean.astype(np.float32), scale=self.scale.astype(np.float32),
                 w=self.w.astype(np.float32), b=np.float32(self.b), model=np.array(self.model))

    @classmethod
    def load(cls, path: str | Path, encoder: WhisperEncoder | None = None
             ) -> AcousticClassifier:
        from parley.errors import ModelCorruptError, ModelNotFoundError

        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(str(path), "acoustic end-of-turn weights not found")
        try:
            with np.load(path) as z:
                return cls(z["mean"], z["scale"], z["w"], float(z["b"]), encoder, str(z["model"]))
        except (KeyError, ValueError, OSError) as e:
            raise ModelCorruptError(str(path), f"bad acoustic end-of-turn weights: {e}") from e
