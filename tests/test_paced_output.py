"""PacedAudioOutput: real-time playout, and `speed` times faster for long soaks."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from livekit import rtc

from pipeline.audio_io import PacedAudioOutput

pytestmark = pytest.mark.unit
RATE = 24_000


def _frames(seconds: float, frame_s: float = 0.1) -> list[rtc.AudioFrame]:
    n = round(RATE * frame_s)
    return [rtc.AudioFrame(np.full(n, 1000, np.int16).tobytes(), RATE, 1, n) for _ in range(round(seconds / frame_s))]


async def _play(speed: float, seconds: float) -> tuple[float, float, int]:
    """-> (wall seconds from the first frame to playback finished, reported position, samples)."""
    got: list[int] = []
    out = PacedAudioOutput(lambda pcm, rate: got.append(len(pcm)), sample_rate=RATE, speed=speed)
    try:
        t0 = time.monotonic()
        for f in _frames(seconds):
            await out.capture_frame(f)
        out.flush()
        ev = await asyncio.wait_for(out.wait_for_playout(), 10)
        return time.monotonic() - t0, ev.playback_position, sum(got)
    finally:
        await out.aclose()


@pytest.mark.parametrize("speed", [1.0, 4.0])
def test_playout_takes_audio_time_over_speed_and_reports_audio_seconds(speed):
    wall, position, samples = asyncio.run(_play(speed, 1.0))
    assert samples == RATE  # every sample reached the sink
    assert position == pytest.approx(1.0, abs=1e-6)  # in audio seconds, whatever the speed
    # paced: not before the audio's duration / speed; loose above (a busy CI machine)
    audio_time = 1.0 / speed
    assert audio_time - 0.02 <= wall <= audio_time + 0.4


def test_speed_out_of_range_is_refused():
    for bad in (0.0, 0.4, 9.0):
        with pytest.raises(ValueError, match="speed"):
            PacedAudioOutput(lambda pcm, rate: None, sample_rate=RATE, speed=bad)
