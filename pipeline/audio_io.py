"""Serverless audio I/O for AgentSession: a push-fed input and a real-time paced output.

A LiveKit room brings its own I/O (RoomIO); the local page, the benchmark and the tests use
these two instead, through the transport boundary (pipeline/transport.py).

`PacedAudioOutput` plays like a speaker: each captured frame is handed to the sink when it is
due (`lead_s` early, for a client-side jitter buffer), so playback position, interruption and
pause are real-time quantities and "first frame handed to the output" is a true audible time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

import numpy as np
from livekit import rtc
from livekit.agents.voice import io

from parley.audio import MAX_RATE, MIN_RATE, float_to_int16
from parley.errors import AudioFormatError
from pipeline.transport import AudioSink

MAX_FRAME_S = 1.0  # one pushed buffer: a transport frame is 10-100 ms; a second is generous


def to_int16_mono(pcm: np.ndarray, sample_rate: int) -> np.ndarray:
    """Check one transport frame and return it as int16 mono [N] (rate unchanged).
    Refuses (AudioFormatError) empty, oversized, NaN/inf, wrong-dtype or impossible-rate input."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer) or not (
            MIN_RATE <= int(sample_rate) <= MAX_RATE):
        raise AudioFormatError(f"sample rate {sample_rate!r} is outside {MIN_RATE}-{MAX_RATE} Hz")
    if not isinstance(pcm, np.ndarray):
        raise AudioFormatError(f"audio must be a numpy array, got {type(pcm).__name__}")
    if pcm.ndim == 2:  # [N, channels]
        pcm = pcm.mean(axis=1, dtype=np.float64).astype(pcm.dtype) if pcm.dtype != np.int16 else (
            pcm.astype(np.int32).mean(axis=1).astype(np.int16))
    if pcm.ndim != 1:
        raise AudioFormatError(f"audio must be [N] or [N, channels], got shape {pcm.shape}")
    if pcm.size == 0:
        raise AudioFormatError("audio frame is empty")
    if pcm.size > MAX_FRAME_S * int(sample_rate):
        raise AudioFormatError(f"audio frame of {pcm.size / sample_rate:.1f} s is over the {MAX_FRAME_S:.0f} s limit "
                               "(send 10-100 ms frames)")
    if pcm.dtype == np.int16:
        return pcm
    if pcm.dtype in (np.float32, np.float64):
        if not np.isfinite(pcm).all():
            raise AudioFormatError("audio contains NaN or infinite samples")
        if float(np.abs(pcm).max()) > 2.0:
            raise AudioFormatError("float audio must be in [-1, 1] (int16 values passed as float?)")
        return float_to_int16(pcm)
    raise AudioFormatError(f"audio dtype {pcm.dtype} is not supported (use int16 or float32)")


class PushAudioInput(io.AudioInput):
    """Frames pushed by a transport (any thread-safe caller on the loop) become the session's
    input. The rate may change between frames only at a new stream (a transport's choice)."""

    def __init__(self, *, max_queued_s: float = 5.0) -> None:
        super().__init__(label="parley-push")
        self._queue: asyncio.Queue[rtc.AudioFrame | None] = asyncio.Queue()
        self._queued_s = 0.0
        self._max_queued_s = max_queued_s
        self._rate: int | None = None
        self.dropped_s = 0.0  # audio dropped because the session fell behind (reported)

    def push(self, pcm: np.ndarray, sample_rate: int) -> None:
        x = to_int16_mono(pcm, sample_rate)
        if self._rate is not None and int(sample_rate) != self._rate:
            raise AudioFormatError(f"sample rate changed from {self._rate} to {sample_rate} Hz mid-stream")
        self._rate = int(sample_rate)
        dur = len(x) / self._rate
        if self._queued_s + dur > self._max_queued_s:  # the consumer is stuck: keep memory bounded
            self.dropped_s += dur
            return
        self._queued_s += dur
        self._queue.put_nowait(rtc.AudioFrame(x.tobytes(), self._rate, 1, len(x)))

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def __anext__(self) -> rtc.AudioFrame:
        frame = await self._queue.get()
        if frame is None:
            self._queue.put_nowait(None)
            raise StopAsyncIteration
        self._queued_s = max(0.0, self._queued_s - frame.duration)
        return frame


class PacedAudioOutput(io.AudioOutput):
    """Hands captured frames to `sink` in real time (`speed` > 1: that many times faster, for a
    soak that runs a long conversation in less time; positions stay in audio seconds).
    `on_first_frame(t)` is called with the monotonic time each segment's first frame reaches the
    sink; `on_clear()` when playback stops for an interruption: a pause (the user may have only
    coughed: resume() goes on) or a clear."""

    def __init__(self, sink: AudioSink, *, sample_rate: int | None = None, lead_s: float = 0.0,
                 on_first_frame: Callable[[float], None] | None = None,
                 on_clear: Callable[[], None] | None = None, speed: float = 1.0) -> None:
        super().__init__(label="parley-paced", capabilities=io.AudioOutputCapabilities(pause=True),
                         sample_rate=sample_rate)
        if not 0.0 <= lead_s <= 1.0:
            raise ValueError("lead_s must be in [0, 1]")
        if not 0.5 <= speed <= 8.0:
            raise ValueError(f"speed must be in [0.5, 8], got {speed}")
        self._sink, self._lead, self._speed = sink, lead_s, speed
        self._on_first_frame, self._on_clear = on_first_frame, on_clear
        self._frames: deque[rtc.AudioFrame] = deque()
        self._wake = asyncio.Event()
        self._segment_open = False  # captured frames since the last flush/clear
        self._flushed = False  # the open segment's input is complete
        self._started_at: float | None = None  # monotonic: the segment's first frame played
        self._played_s = 0.0  # audio handed to the sink in this segment
        self._paused_at: float | None = None
        self._task: asyncio.Task | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._segment_open:
            self._segment_open, self._flushed = True, False
            self._started_at, self._played_s = None, 0.0
        self._frames.append(frame)
        self._ensure_task()
        self._wake.set()

    def flush(self) -> None:
        super().flush()
        if self._segment_open:
            self._flushed = True
            self._wake.set()

    def clear_buffer(self) -> None:
        if not self._segment_open:
            return
        self._frames.clear()
        position = self._position()
        self._segment_open = False
        if self._on_clear is not None and self._paused_at is None:
            self._on_clear()
        self._paused_at = None
        self.on_playback_finished(playback_position=position, interrupted=True)
        self._wake.set()

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()
            if self._on_clear is not None and self._segment_open:
                self._on_clear()

    def resume(self) -> None:
        if self._paused_at is not None:
            if self._started_at is not None:
                self._started_at += time.monotonic() - self._paused_at  # the clock stood still
            self._paused_at = None
            self._wake.set()

    def _position(self) -> float:
        if self._started_at is None:
            return 0.0
        now = self._paused_at or time.monotonic()
        return max(0.0, min(self._played_s, (now - self._started_at) * self._speed + self._lead))

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._play(), name="parley-paced-output")

    async def _play(self) -> None:
        while True:
            self._wake.clear()
            if self._paused_at is None and self._frames:
                frame = self._frames[0]
                now = time.monotonic()
                if self._started_at is None:
                    self._started_at = now
                    self.on_playback_started(created_at=time.time())
                    if self._on_first_frame is not None:
                        self._on_first_frame(now)
                due = self._started_at + (self._played_s - self._lead) / self._speed
                if due > now:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), due - now)
                    continue
                self._frames.popleft()
                pcm = np.frombuffer(frame.data, dtype=np.int16)
                if frame.num_channels > 1:
                    pcm = pcm.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
                self._sink(pcm, frame.sample_rate)
                self._played_s += frame.duration
                continue
            if self._segment_open and self._flushed and not self._frames and self._paused_at is None:
                end = (self._started_at or time.monotonic()) + self._played_s / self._speed
                if time.monotonic() < end:  # the last frame is still sounding
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), end - time.monotonic())
                    continue
                self._segment_open = False
                self.on_playback_finished(playback_position=self._played_s, interrupted=False)
                continue
            await self._wake.wait()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class MarkingAudioOutput(io.AudioOutput):
    """Wraps another output (a LiveKit room's) and reports when each segment's first frame is
    handed to it: the budget's `output_first_frame` where the room, not us, paces playback."""

    def __init__(self, next_in_chain: io.AudioOutput, on_first_frame: Callable[[float], None]) -> None:
        super().__init__(label="parley-marking", capabilities=io.AudioOutputCapabilities(pause=True),
                         next_in_chain=next_in_chain, sample_rate=next_in_chain.sample_rate)
        self._on_first_frame = on_first_frame
        self._in_segment = False

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._in_segment:
            self._in_segment = True
            self._on_first_frame(time.monotonic())
        await self.next_in_chain.capture_frame(frame)

    def flush(self) -> None:
        super().flush()
        self._in_segment = False
        self.next_in_chain.flush()

    def clear_buffer(self) -> None:
        self._in_segment = False
        self.next_in_chain.clear_buffer()
