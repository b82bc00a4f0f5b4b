"""`parley bench voice`: perceived latency of whole conversations replayed in real time
(logic and options in benchmarks/voice.py)."""

from __future__ import annotations

from pipeline.commands.bench import register_forwarded


def register_bench(sub) -> None:
    register_forwarded(sub, "voice", "voice latency as heard: real-time conversation replay, stereo WAVs, report",
                       "benchmarks.voice")
