"""Turn detection: streaming Silero VAD and our audio end-of-turn detector."""

from turn_detection.detector import EndOfTurn, EndOfTurnDetector, EndOfTurnStream, Evaluation
from turn_detection.fake import FakeEndOfTurnDetector
from turn_detection.policy import EndpointingPolicy
from turn_detection.vad import SileroVAD, VADConfig, VADEvent, VADStream

__all__ = [
    "EndOfTurn",
    "EndOfTurnDetector",
    "EndOfTurnStream",
    "EndpointingPolicy",
    "Evaluation",
    "FakeEndOfTurnDetector",
    "SileroVAD",
    "VADConfig",
    "VADEvent",
    "VADStream",
]
