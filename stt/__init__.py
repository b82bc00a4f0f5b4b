"""Streaming speech-to-text on faster-whisper: interim (stable-prefix), preflight and final
transcripts of a turn, Silero-gated so silence is never decoded; plus one-shot transcription."""

from stt.config import TranscriberConfig
from stt.decoder import WhisperDecoder
from stt.events import Transcript, TranscriptEvent, Word
from stt.fake import FakeTranscriber
from stt.offline import transcribe
from stt.replay import Replay, replay
from stt.streaming import StreamingTranscriber

__all__ = [
    "FakeTranscriber",
    "Replay",
    "StreamingTranscriber",
    "TranscriberConfig",
    "Transcript",
    "TranscriptEvent",
    "WhisperDecoder",
    "Word",
    "replay",
    "transcribe",
]
