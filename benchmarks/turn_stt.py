"""The streaming STT's transcripts of benchmark clips, with the times the session would get them.

Each clip is replayed through stt.StreamingTranscriber as fast as decoding allows, every due
decode done (stt.replay, realtime=False): the decodes are those a real-time replay makes on
an idle core. An event's arrival time is the stream time of the newest audio it covers plus
the wall time between that audio's push and the event (its decode time; on a shared machine
this is pessimistic). The same timeline is replayed into every detector policy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE

TAIL_S = 1.5  # audio replayed after the turn end: every policy has decided by then (max_wait <= 1.2 s)


def stt_timeline(decoder, audio: np.ndarray, turn_end: float) -> list[tuple[float, str]]:
    """-> [(arrival stream time s, text)] of the interim / preflight events of one clip, from
    a fresh transcriber (stream time 0 at the clip's start) sharing `decoder`'s model."""
    from stt import StreamingTranscriber
    from stt.replay import replay

    with StreamingTranscriber(decoder.config, decoder=decoder) as transcriber:
        out = replay(transcriber, audio, ENGINE_RATE, realtime=False, flush_at_s=turn_end + TAIL_S)
    return sorted((e.audio_time_s + e.latency_s, e.text) for e in out.events if e.kind in ("interim", "preflight"))


def _key(clip) -> str:
    return f"{clip.name}:{hashlib.sha1(np.ascontiguousarray(clip.audio).tobytes()).hexdigest()[:16]}"


def cached_names(cache: str | Path) -> set[str]:
    """Names of the clips whose timelines `cache` holds."""
    path = Path(cache)
    return {k.rsplit(":", 1)[0] for k in json.loads(path.read_text())} if path.is_file() else set()


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
