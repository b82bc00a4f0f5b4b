"""Silero VAD (v5/v6 ONNX, from the `silero-vad` package) with a streaming, hysteresis
front end. One speech probability per 512-sample (32 ms) window at 16 kHz."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE, validate_audio
from parley.errors import ModelCorruptError, ModelNotFoundError

WINDOW = 512  # samples per probability at 16 kHz (the model's only accepted size there)
CONTEXT = 64  # samples of the previous window the v5/v6 model expects in front of each window
WINDOW_S = WINDOW / ENGINE_RATE


@dataclass(frozen=True)
class VADConfig:
    """Hysteresis: speech starts after `min_speech_s` of windows >= threshold, ends after
    `min_silence_s` of windows < neg_threshold; events are widened by `padding_s`."""

    threshold: float = 0.5
    neg_threshold: float | None = None  # default threshold - 0.15 (Silero's own default)
    min_speech_s: float = 0.1
    min_silence_s: float = 0.3
    padding_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be in (0, 1)")
        if self.neg_threshold is not None and not 0.0 < self.neg_threshold <= self.threshold:
            raise ValueError("neg_threshold must be in (0, threshold]")
        for name in ("min_speech_s", "min_silence_s", "padding_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @property
    def off_threshold(self) -> float:
        return self.neg_threshold if self.neg_threshold is not None else max(0.01, self.threshold - 0.15)


@dataclass(frozen=True)
class VADEvent:
    kind: str  # "start" | "end"
    time_s: float  # stream time of the speech start / end (padding applied)


class SileroVAD:
    """The ONNX model plus its recurrent state. `probabilities` runs a whole buffer from a
    fresh state; `stream()` gives an incremental detector with its own state."""

    def __init__(self, path: str | Path | None = None, threads: int = 1, config: VADConfig = VADConfig()):
        import onnxruntime as ort

        if path is None:
            from parley.assets import model_path

            path = model_path("silero-vad")
        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(str(path), "Silero VAD ONNX file not found")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        except (RuntimeError, ValueError, OSError) as e:  # onnxruntime raises RuntimeError subclasses
            raise ModelCorruptError(str(path), f"cannot load Silero VAD: {e}") from e
        names = {i.name for i in self._session.get_inputs()}
        if names != {"input", "state", "sr"}:
            raise ModelCorruptError(str(path), f"not a Silero v5/v6 VAD (inputs {sorted(names)})")
        self.config = config
        self._sr = np.array(ENGINE_RATE, dtype=np.int64)

    def new_state(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((2, 1, 128), dtype=np.float32), np.zeros(CONTEXT, dtype=np.float32)

    def window_probability(self, window: np.ndarray, state: np.ndarray, context: np.ndarray):
        """window [512] float32 -> (probability, new state [2, 1, 128], new context [64])."""
        x = np.concatenate([context, window])[None, :]  # [1, 576]
        out, new_state = self._session.run(None, {"input": x, "state": state, "sr": self._sr})
        return float(out[0, 0]), new_state, window[-CONTEXT:].copy()

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """audio: 16 kHz mono [N] -> [ceil(N / 512)] speech probabilities (last window zero-padded)."""
        x = validate_audio(audio, ENGINE_RATE, allow_empty=True)
        n = -(-len(x) // WINDOW)
        x = np.pad(x, (0, n * WINDOW - len(x)))
        state, context = self.new_state()
        probs = np.empty(n, dtype=np.float32)
        for i in range(n):
            probs[i], state, context = self.window_probability(x[i * WINDOW : (i + 1) * WINDOW], state, context)
        return probs

    def stream(self, config: VADConfig | None = None) -> VADStream:
        return VADStream(self, config or self.config)


def _checked_probability(p: float) -> float:
    try:
        q = float(p)
    except (TypeError, ValueError) as e:
        raise ValueError(f"speech probability must be a number, got {p!r}") from e
    if not 0.0 <= q <= 1.0:  # also rejects NaN
        raise ValueError(f"speech probability must be in [0, 1], got {p!r}")
    return q


class VADStream:
    """Push frames of any length; returns the start/end events completed by that frame."""

    def __init__(self, vad: SileroVAD, config: VADConfig):
        self._vad = vad
        self.config = config
        self.reset()

    def reset(self) -> None:
        self._state, self._context = self._vad.new_state()
        self._pending = np.zeros(0, dtype=np.float32)
        self.windows = 0  # windows processed; window i covers [i, i + 1) * WINDOW_S
        self.speaking = False
        self.last_probability = 0.0
        self._run = 0  # consecutive windows on the other side of the hysteresis
        self._last_speech_end = 0.0

    @property
    def time_s(self) -> float:
        return self.windows * WINDOW_S

    def push(self, frame: np.ndarray) -> list[VADEvent]:
        x = validate_audio(frame, ENGINE_RATE, allow_empty=True)
        buf = np.concatenate([self._pending, x]) if len(self._pending) else x
        events: list[VADEvent] = []
        n = len(buf) // WINDOW
        for i in range(n):
            ev = self.push_window(buf[i * WINDOW : (i + 1) * WINDOW])
            if ev is not None:
                events.append(ev)
        self._pending = buf[n * WINDOW :].copy()
        return events

    def push_window(self, window: np.ndarray) -> VADEvent | None:
        """One 512-sample window: the model, then `push_probability`."""
        p, self._state, self._context = self._vad.window_probability(window, self._state, self._context)
        return self.push_probability(p)

    def push_probability(self, p: float) -> VADEvent | None:
        """The hysteresis step alone, for a window whose speech probability was computed
        elsewhere (the session runs Silero once per window and shares it). Updates
        `last_probability`, `windows` and the hysteresis; the model's recurrent state is
        untouched, so a stream fed this way should be fed this way throughout."""
        p = _checked_probability(p)
        self.last_probability = p
        self.windows += 1
        cfg = self.config
        if not self.speaking:
            self._run = self._run + 1 if p >= cfg.threshold else 0
            if self._run * WINDOW_S >= max(cfg.min_speech_s, WINDOW_S):
                self.speaking, self._run = True, 0
                start = self.time_s - max(cfg.min_speech_s, WINDOW_S) - cfg.padding_s
                self._last_speech_end = self.time_s
                return VADEvent("start", max(0.0, start))
            return None
        if p >= cfg.off_threshold:
            self._run = 0
            self._last_speech_end = self.time_s
            return None
        self._run += 1
        if self._run * WINDOW_S >= cfg.min_silence_s:
            self.speaking, self._run = False, 0
            return VADEvent("end", self._last_speech_end + cfg.padding_s)
        return None
