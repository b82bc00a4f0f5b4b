"""The streaming STT's transcripts of benchmark clips, with the times the session would get them.

Each clip is replayed through stt.StreamingTranscriber in real time (stt.replay, 20 ms frames
paced as a microphone sends them), so an event comes when the session would get it: an
event's arrival time is the stream time of the newest audio pushed plus the wall time since
that push. Keep the machine otherwise quiet while a cache is built: a busy core delays the
decodes as it would in a session. The same timeline is replayed into every detector policy.

A replay "as fast as decoding allows" (every due decode done before the next frame) is not
the same timeline, and the earlier caches were built so: there a tentative pause decode
(stt.config tentative_pause) was done before the pause was confirmed and came out at the
confirmation, 0.5-0.8 s before it could have on one Zen 1 core, and the interim it would
have abandoned still came out, sorted after it: "What should I plant in a shady corner of
the garden" at 2.92 s, then "... corner of the" at 2.96 s, where in real time the first came
at 3.72 s and the second never."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE

TAIL_S = 2.0  # audio replayed after the turn end: every policy has decided by then (max_wait <= 2.0 s)
# in the cache key: timelines of the fast replay (no mode) and those made before a pause
# decode's preflight went out ahead of its word alignment ("rt") are not reused
_MODE = "rt-early"


def stt_timeline(decoder, audio: np.ndarray, turn_end: float) -> list[tuple[float, str]]:
    """-> [(arrival stream time s, text)] of the interim / preflight events of one clip, from
    a fresh transcriber (stream time 0 at the clip's start) sharing `decoder`'s model."""
    from stt import StreamingTranscriber
    from stt.replay import replay

    with StreamingTranscriber(decoder.config, decoder=decoder) as transcriber:
        out = replay(transcriber, audio, ENGINE_RATE, realtime=True, flush_at_s=turn_end + TAIL_S)
    return sorted((e.audio_time_s + e.latency_s, e.text) for e in out.events if e.kind in ("interim", "preflight"))


def _key(clip) -> str:
    return f"{clip.name}:{hashlib.sha1(np.ascontiguousarray(clip.audio).tobytes()).hexdigest()[:16]}:{_MODE}"


def cached_names(cache: str | Path) -> set[str]:
    """Names of the clips whose timelines `cache` holds."""
    path = Path(cache)
    return {k.split(":", 1)[0] for k in json.loads(path.read_text()) if k.endswith(f":{_MODE}")} if path.is_file() else set()


def stt_timelines(clips, cache: str | Path | None = None, decoder=None) -> list[list[tuple[float, str]]]:
    """stt_timeline for every clip (decoder: a stt WhisperDecoder, default the default model);
    `cache` (a JSON file) keeps them between runs, keyed by clip name and audio digest."""
    path = Path(cache) if cache else None
    known: dict = json.loads(path.read_text()) if path and path.is_file() else {}
    missing = [c for c in clips if _key(c) not in known]
    if missing:
        if decoder is None:
            from stt.config import TranscriberConfig
            from stt.decoder import WhisperDecoder

            decoder = WhisperDecoder(TranscriberConfig())
        for i, c in enumerate(missing):
            known[_key(c)] = stt_timeline(decoder, c.audio, c.turn_end)
            if path and (i % 20 == 19 or i == len(missing) - 1):  # a long run keeps its work
                path.write_text(json.dumps(known))
    return [[(float(t), str(x)) for t, x in known[_key(c)]] for c in clips]
