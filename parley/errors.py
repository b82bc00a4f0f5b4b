"""The project's error classes. Every error says whether retrying the same call may succeed."""

from __future__ import annotations


class ParleyError(Exception):
    """Base class. `retryable` tells a caller whether the same call may succeed later
    (a full KV cache, a busy worker) or never will (a missing model, bad input)."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable


class AudioFormatError(ParleyError, ValueError):
    """Audio that cannot be used as given: wrong dtype, NaN/inf, empty, bad sample rate."""


class KVCacheFullError(ParleyError, RuntimeError):
    """The paged KV cache has no free block for the tokens asked for. Retryable: blocks free
    up as other sequences finish; the call that raised has rolled back what it took."""

    retryable = True


class EngineClosedError(ParleyError, RuntimeError):
    """The engine was closed (`LLMEngine.close`, the process shutting down): it takes no new
    requests, and the ones it held ended with this error. Not retryable on the same engine."""


class ModelError(ParleyError):
    """A model could not be found or loaded. `fix` says what to do about it."""

    def __init__(self, model: str, cause: str, fix: str = "") -> None:
        self.model = model
        self.cause = cause
        self.fix = fix
        text = f"{model}: {cause}"
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text, retryable=False)


class ModelNotFoundError(ModelError, FileNotFoundError):
    """The package or file that carries a model is not installed."""


class ModelCorruptError(ModelError):
    """The model file exists but is truncated or unreadable."""


class StageTimeoutError(ParleyError, TimeoutError):
    """A pipeline stage (LLM, TTS, STT) gave nothing within its deadline. Retryable: a stall is
    usually transient (a busy core, a preempted request); the session apologizes and goes on."""

    retryable = True

    def __init__(self, stage: str, deadline_s: float, what: str = "output") -> None:
        self.stage, self.deadline_s = stage, deadline_s
        super().__init__(f"{stage}: no {what} within its {deadline_s:g} s deadline")


class StageOutputError(ParleyError):
    """A stage returned output that cannot be used (empty, wrong type, garbage). Retryable:
    the next turn asks again."""

    retryable = True
