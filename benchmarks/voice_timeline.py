"""One clip's audio timeline: what the user said (left) and what the agent played (right), on
one 16 kHz clock, so a latency can be read from the audio itself.

t = 0 is the moment the clip's first sample was "spoken": the replay hands frame i (samples
320 i .. 320 i + 319) to the session at t = 0.02 (i + 1), when a microphone would have it, so
sample s is spoken at s / 16000 on both the wall clock and the timeline. An agent frame lands
at its arrival time, or right after the previous agent frame if that one is still playing (the
session paces frames in real time, give or take a small lead); an interrupt drops whatever
was placed beyond now. A frame arriving at most JITTER_S after the previous one ended joins
it without a gap, as a playout buffer would play it (asyncio wake-ups on a loaded 2-core
machine run a few ms late; without this the WAV had sub-millisecond holes between frames,
and the first frame of a reply, placed after silence, is unaffected). Agent audio at another rate (Piper's 22.05 kHz) is converted with one
streaming resampler per rate (0.5 ms of filter delay at 22.05 -> 16 kHz)."""

from __future__ import annotations

import numpy as np

from parley.audio import ENGINE_RATE, Resampler, int16_to_float

JITTER_S = 0.02


class _Track:
    """A growable float32 buffer written at arbitrary positions."""

    def __init__(self) -> None:
        self.data = np.zeros(ENGINE_RATE * 8, dtype=np.float32)
        self.length = 0

    def write(self, start: int, x: np.ndarray) -> None:
        end = start + len(x)
        if end > len(self.data):
            grown = np.zeros(max(end, 2 * len(self.data)), dtype=np.float32)
            grown[: self.length] = self.data[: self.length]
            self.data = grown
        self.data[start:end] = x
        self.length = max(self.length, end)

    def truncate(self, end: int) -> None:
        if end < self.length:
            self.data[end : self.length] = 0.0
            self.length = max(end, 0)

    def array(self, length: int) -> np.ndarray:
        out = np.zeros(length, dtype=np.float32)
        n = min(length, self.length)
        out[:n] = self.data[:n]
        return out


class Timeline:
    """Built live by the replay: `add_user` per pushed frame, `add_agent` per agent frame,
    `add_event` per session event; `now` values are the replay's monotonic clock (seconds)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0  # monotonic time of the clip's first sample
        self._user = _Track()
        self._agent = _Track()
        self._cursor = 0  # where the agent's next frame may start (end of the last one)
        self._resamplers: dict[int, Resampler] = {}
        self.events: list[tuple[float, dict]] = []  # (timeline seconds, event)
        self.last_agent_arrival: float | None = None  # timeline seconds
        self.agent_frames = 0

    def index(self, now: float) -> int:
        return max(0, round((now - self.t0) * ENGINE_RATE))

    def seconds(self, now: float) -> float:
        return now - self.t0

    def add_user(self, samples: np.ndarray) -> None:
        self._user.write(self._user.length, np.asarray(samples, dtype=np.float32))

    def add_agent(self, pcm: np.ndarray, sample_rate: int, now: float) -> int:
        """Place one agent frame (int16 or float mono); -> its start index on the timeline."""
        x = np.asarray(pcm)
        x = int16_to_float(x) if x.dtype == np.int16 else x.astype(np.float32)
        if sample_rate != ENGINE_RATE:
            rs = self._resamplers.get(sample_rate)
            if rs is None:
                rs = self._resamplers[sample_rate] = Resampler(sample_rate, ENGINE_RATE)
            x = rs.process(x)
        start = max(self.index(now), self._cursor)
        if start - self._cursor <= JITTER_S * ENGINE_RATE and self.agent_frames:
            start = self._cursor
        self._agent.write(start, x)
        self._cursor = start + len(x)
        self.last_agent_arrival = self.seconds(now)
        self.agent_frames += 1
        return start

    def interrupt(self, now: float) -> None:
        """Drop the agent audio placed beyond now (still buffered, never played)."""
        cut = self.index(now)
        self._agent.truncate(cut)
        self._cursor = min(self._cursor, cut)

    def add_event(self, event: dict, now: float) -> None:
        self.events.append((self.seconds(now), event))

    def agent_playing(self, now: float) -> bool:
        return self._cursor > self.index(now)

    @property
    def user_samples(self) -> int:
        return self._user.length

    @property
    def length(self) -> int:
        return max(self._user.length, self._agent.length)

    def user_track(self) -> np.ndarray:
        return self._user.array(self.length)

    def agent_track(self) -> np.ndarray:
        return self._agent.array(self.length)

    def stereo(self) -> np.ndarray:
        """[N, 2] float32: left = user input, right = agent output."""
        return np.stack([self.user_track(), self.agent_track()], axis=1)
