"""Drive a serverless voice session in real time, like a transport: push 20 ms frames of a
clip at wall-clock pace, collect the agent's frames (with arrival times) and events."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

from pipeline.session import start_voice_session

FRAME = 320  # 20 ms at 16 kHz


@dataclass
class Run:
    t0: float = 0.0  # monotonic time of the first pushed sample
    out: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (t since t0, int16 frame)
    events: list[tuple[float, dict]] = field(default_factory=list)

    def sink(self, pcm: np.ndarray, rate: int) -> None:
        self.out.append((time.monotonic() - self.t0, pcm.copy()))

    def on_event(self, ev: dict) -> None:
        self.events.append((time.monotonic() - self.t0, ev))

    def of(self, kind: str) -> list[dict]:
        return [e for _, e in self.events if e["type"] == kind]

    def first_audible(self, after: float = 0.0, level: int = 300) -> float | None:
        for t, pcm in self.out:
            if t >= after and int(np.abs(pcm).max()) > level:
                return t
        return None

    def agent_audio(self) -> np.ndarray:
        return np.concatenate([p for _, p in self.out]) if self.out else np.zeros(0, np.int16)


async def start(config, components) -> tuple:
    run = Run()
    vs = await start_voice_session(config, components, run.sink, run.on_event)
    run.t0 = time.monotonic()
    return vs, run


async def play(vs, run: Run, audio: np.ndarray, rate: int = 16_000) -> float:
    """Push `audio` (float32 [-1, 1]) in 20 ms frames at real-time pace; returns the time (since
    run.t0) at which it started."""
    pcm = np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)
    step = rate // 50
    start_t = time.monotonic() - run.t0
    for k, i in enumerate(range(0, len(pcm), step)):
        vs.push_audio(pcm[i:i + step], rate)
        due = run.t0 + start_t + (k + 1) * 0.02
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    return start_t


async def wait_for(run: Run, pred, limit_s: float, vs=None) -> bool:
    """Wait until pred() holds. With `vs`, keep its microphone live meanwhile: 20 ms of silence
    every 20 ms, as a real transport sends (the detector decides on the silence it hears)."""
    end = time.monotonic() + limit_s
    quiet = np.zeros(FRAME, np.int16)
    while time.monotonic() < end:
        if pred():
            return True
        if vs is not None:
            vs.push_audio(quiet, 16_000)
        await asyncio.sleep(0.02)
    return pred()


def silence(seconds: float, rate: int = 16_000) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)
