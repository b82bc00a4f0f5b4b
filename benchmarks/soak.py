"""Soak: many turns in 1, 4 and 8 concurrent serverless voice sessions sharing one engine.

    python -m benchmarks.soak --turns 20 --sessions 1,4,8 [--real] [--out FILE.json]

Each session hears the same spoken question (Piper, 16 kHz, real-time pace) then 0.8 s of
silence, `--turns` times (`--speed` N: the question, the silence and the reply's playout all
run N times faster, so a long soak fits in less time). Reported per concurrency level: turns
asked / answered, error events, resident memory slope after warm-up (MB per 100 turns, least squares over the turns after the
first 20%; beside it the slope of the heap in use, to tell a leak from an allocator keeping
freed pages), the allocator (run as a script, it re-executes on jemalloc as `parley` does:
pipeline/allocator.py), engine free blocks before / after, live asyncio tasks and threads before / after,
per-session p50 / p90 perceived latency, and what the last request sent (messages, tokens
against the context window, the system prompt first). Each question waits for the previous
reply to play out. The loaded objects are frozen first, as the `parley` commands do
(`--no-freeze`: not), and the full garbage collections of each level are counted. Per turn,
resident memory is also split by kind of mapping, beside jemalloc's account and CPython's
arenas (a step that no allocator's account shows is pages touched for the first time). Default:
timed fakes for STT / LLM / TTS (real Silero VAD); `--real` loads the embedded models.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.voice_report import cpu_model
from parley.audio import resample
from pipeline.allocator import (
    JEMALLOC_STATS,
    allocator_in_use,
    freeze_loaded_objects,
    heap_in_use_mb,
    jemalloc_stats_mb,
    pymalloc_arenas_mb,
    reexec_under_jemalloc,
)

FRAME = 320  # 20 ms at 16 kHz
QUESTION = "What is the weather like today?"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def os_threads() -> int | None:
    """The process's native threads (thread pools of onnxruntime, torch, ...), where
    threading.active_count sees only Python's; None without procfs."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


SPLIT = ("file", "stacks", "anon", "lazy_free", "anon_huge")


def rss_split_mb() -> dict[str, float] | None:
    """Resident memory by kind, from /proc/self/smaps, for telling a step of RSS apart: file
    pages (weights, libraries), thread stacks (8 MiB mappings), other anonymous memory (malloc's
    extents, CPython's object arenas: the kernel merges neighbouring arenas into one mapping,
    so pipeline.allocator.pymalloc_arenas_mb counts those); and, within those, pages freed with
    MADV_FREE that the kernel has not taken back yet (lazy_free) and transparent huge pages
    (anon_huge: khugepaged fills a 2 MiB range in at any time). None without procfs."""
    kb = dict.fromkeys(SPLIT, 0)
    kind = "anon"
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split(maxsplit=6)
                if "-" in head[0] and not head[0].endswith(":"):  # a mapping: "lo-hi perms off dev inode [path]"
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    path = head[5].strip() if len(head) > 5 else ""
                    kind = ("stacks" if path.startswith("[stack") or (not path and hi - lo == 8 << 20)
                            else "file" if path and not path.startswith("[") else "anon")
                elif head[0] == "Rss:":
                    kb[kind] += int(head[1])
                elif head[0] in ("LazyFree:", "AnonHugePages:"):
                    kb["lazy_free" if head[0] == "LazyFree:" else "anon_huge"] += int(head[1])
    except OSError:
        return None
    return {k: round(v / 1024, 2) for k, v in kb.items()}


def speech() -> np.ndarray:
    from tts.piper_voice import PiperOptions, PiperVoiceModel

    voice = PiperVoiceModel.default()
    audio = voice.synthesize(QUESTION, PiperOptions(noise_scale=0.0, noise_w_scale=0.0))
    x = resample(audio, voice.sample_rate, 16_000)
    return np.concatenate([np.zeros(4800, np.float32), x, np.zeros(3200, np.float32)])


def components(real: bool, **overrides):
    """The session config (SessionConfig fields in `overrides`) and its loaded components."""
    from pipeline.components import load_components
    from pipeline.config import SessionConfig

    if real:
        cfg = SessionConfig(preemptive=False, **overrides)
        return cfg, load_components(cfg)
    from llm_engine import FakeLLM
    from stt import FakeTranscriber
    from tts import FakeSynthesizer
    from turn_detection import FakeEndOfTurnDetector

    cfg = SessionConfig(llm="fake", stt="fake", tts="fake", preemptive=False, **overrides)
    return cfg, load_components(
        cfg, engine=FakeLLM(["It is sunny and warm today."], ttft_s=0.1, token_s=0.02),
        detector=FakeEndOfTurnDetector(silence_s=0.2), synthesizer=FakeSynthesizer(first_audio_delay_s=0.05, rtf=0.05),
        transcriber_factory=lambda: FakeTranscriber(("what is the weather like today",), words_per_s=6.0,
                                                    final_delay_s=0.05))


class _Tally:
    """What the soak reads from a session's events, kept as counts: a harness that kept every
    event would itself grow ~10 KB a turn, ten times the memory target."""

    def __init__(self) -> None:
        self.budgets, self.errors, self.spoke, self.state = 0, 0, False, "listening"
        self.perceived: list[float] = []
        self.last_budget: dict | None = None

    def __call__(self, event: dict) -> None:
        if event["type"] == "budget":
            self.budgets += 1
            self.last_budget = event
            if event["perceived_ms"] is not None:
                self.perceived.append(float(event["perceived_ms"]))
        elif event["type"] == "error":
            self.errors += 1
        elif event["type"] == "state":
            self.state = event["agent"]
            self.spoke = self.spoke or self.state == "speaking"

    def played_out(self) -> bool:
        """The agent spoke since the last `spoke = False` and is back to listening."""
        return self.spoke and self.state == "listening"


class _FullCollections:
    """CPython's full (generation 2) collections while registered in gc.callbacks, and the
    longest one: the pause every thread takes while it walks the objects it can reach."""

    def __init__(self) -> None:
        self.count, self.max_ms, self._t0 = 0, 0.0, None

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.count, self.max_ms = self.count + 1, max(self.max_ms, (time.perf_counter() - self._t0) * 1000)
            self._t0 = None


async def _listen(vs, until, limit_s: float, speed: float = 1.0) -> bool:
    """Keep the microphone live (20 ms of silence every 20 ms / speed) until `until()` or the
    limit (real seconds)."""
    end = time.monotonic() + limit_s
    while not until() and time.monotonic() < end:
        vs.push_audio(np.zeros(FRAME, np.int16), 16_000)
        await asyncio.sleep(0.02 / speed)
    return until()


def _history(vs, engine, instructions: str) -> dict:
    """What the last request sent: trimmed to the window, the system prompt first."""
    msgs = getattr(vs.parts.llm, "last_messages", [])
    tokens = len(engine.encode_chat(msgs)) if msgs and hasattr(engine, "encode_chat") else None
    return {"messages": len(msgs), "chat_items": len(vs.parts.agent.chat_ctx.items),
            "session_items": len(vs.session.history.items),
            "system_first": bool(msgs) and msgs[0] == {"role": "system", "content": instructions},
            "prompt_tokens": tokens, "token_limit": getattr(engine, "token_limit", None)}


async def _session(cfg, comps, audio: np.ndarray, turns: int, samples: list[dict], speed: float) -> dict:
    from pipeline.session import start_voice_session

    tally = _Tally()
    vs = await start_voice_session(cfg, comps, lambda pcm, rate: None, tally, playout_speed=speed)
    pcm = np.round(audio * 32767).astype(np.int16)
    lost = 0
    try:
        for turn in range(turns):
            tally.spoke, t0 = False, time.monotonic()
            for k, i in enumerate(range(0, len(pcm), FRAME)):
                vs.push_audio(pcm[i:i + FRAME], 16_000)
                await asyncio.sleep(max(0.0, t0 + (k + 1) * 0.02 / speed - time.monotonic()))
            if not await _listen(vs, lambda n=turn + 1 - lost: tally.budgets >= n, 15, speed):
                lost += 1
            # the reply plays out before the next question (barge-in would cut it short)
            await _listen(vs, tally.played_out, 30, speed)
            await _listen(vs, lambda: False, 0.8 / speed, speed)  # 0.8 s of silence between turns
            samples.append({"rss_mb": rss_mb(), "heap_mb": heap_in_use_mb(),
                            # native threads too: a new pool thread's stack and allocator cache
                            # would be a step of RSS that the heap does not show
                            "os_threads": os_threads(), "rss_split": rss_split_mb(),
                            "jemalloc": jemalloc_stats_mb(), "py_arenas_mb": pymalloc_arenas_mb(),
                            # CPython's live objects in pymalloc blocks: tells objects that stay from
                            # arena pages kept (None under PYTHONMALLOC=malloc, which counts none)
                            "py_blocks": sys.getallocatedblocks() or None, "tasks": len(asyncio.all_tasks()),
                            "threads": threading.active_count(),
                            "free_blocks": getattr(comps.engine, "num_free_blocks", None),
                            # Piper's runs with arena shrinkage: each moves the heap by ~32-128 MB
                            "tts_arena_shrinks": getattr(getattr(comps.synthesizer, "voice", None),
                                                         "arena_shrinks", None)})
            last = samples[-1]  # progress, and the figures so far if the run is cut short
            print(f"soak: turn {turn + 1}/{turns} answered {tally.budgets} errors {tally.errors} "
                  f"rss {last['rss_mb']:.1f} MB heap {last['heap_mb'] or 0:.1f} MB", file=sys.stderr, flush=True)
        history = _history(vs, comps.engine, cfg.instructions)
    finally:
        await vs.aclose()
    last, perceived = tally.last_budget, tally.perceived
    # an acknowledged turn has no first clause of its own (the acknowledgement was spoken first)
    na = {"first_clause"} if last and last["acknowledged"] else set()
    missing = sorted({s["name"] for s in (last["stages"] if last else []) if s.get("ms") is None} - na)
    return {"turns": turns, "answered": tally.budgets, "lost": turns - tally.budgets, "errors": tally.errors,
            "p50_ms": float(np.percentile(perceived, 50)) if perceived else None,
            "p90_ms": float(np.percentile(perceived, 90)) if perceived else None,
            "last_budget_complete": last is not None and last["perceived_ms"] is not None and not missing,
            "last_budget_missing": missing, "history": history}


def slope_per_100(ys: list[float]) -> float | None:
    """Least-squares slope per 100 turns over the samples after the first 20% (warm-up)."""
    ys = [y for y in ys if y is not None][len(ys) // 5:]
    if len(ys) < 3:
        return None
    return float(np.polyfit(np.arange(len(ys)), ys, 1)[0] * 100)


async def level(cfg, comps, audio, n: int, turns: int, speed: float = 1.0) -> dict:
    engine = comps.engine
    blocks0 = getattr(engine, "num_free_blocks", None)
    tasks0, threads0 = len(asyncio.all_tasks()), threading.active_count()
    samples: list[dict] = []
    t0, full = time.monotonic(), _FullCollections()
    gc.callbacks.append(full)
    try:
        per = await asyncio.gather(*(_session(cfg, comps, audio, turns, samples, speed) for _ in range(n)))
        await asyncio.sleep(1.0)  # let closed sessions' threads end
    finally:
        gc.callbacks.remove(full)
    series = {k: [s[k] for s in samples] for k in ("rss_mb", "heap_mb", "py_blocks", "py_arenas_mb", "tasks",
                                                    "threads", "os_threads", "free_blocks")}
    shrinks = [s["tts_arena_shrinks"] for s in samples]
    return {"sessions": n, "turns_per_session": turns, "speed": speed, "wall_s": time.monotonic() - t0,
            "answered": sum(p["answered"] for p in per), "lost": sum(p["lost"] for p in per),
            "errors": sum(p["errors"] for p in per), "rss_slope_mb_per_100_turns": slope_per_100(series["rss_mb"]),
            "rss_mb_end": samples[-1]["rss_mb"] if samples else None,
            "rss_mb_series": [round(s["rss_mb"], 1) for s in samples],  # after each turn, in finishing order
            # what malloc has handed out and not had back (pipeline.allocator.heap_in_use_mb)
            "heap_mb_series": [None if s["heap_mb"] is None else round(s["heap_mb"], 1) for s in samples],
            "os_threads_series": series["os_threads"],
            # the same RSS by kind of mapping (rss_split_mb), for a step the heap does not show
            "rss_split_mb_series": {k: [s["rss_split"][k] for s in samples] for k in SPLIT}
            if samples and None not in [s["rss_split"] for s in samples] else None,
            # CPython's object arenas, 1 MiB each: pages a few live objects can pin
            "pymalloc_arenas_mb_series": series["py_arenas_mb"] if None not in series["py_arenas_mb"] else None,
            # jemalloc's own account (pipeline.allocator.JEMALLOC_STATS): fragmentation, metadata
            "jemalloc_mb_series": {k: [round(s["jemalloc"][k], 2) for s in samples] for k in JEMALLOC_STATS}
            if samples and None not in [s["jemalloc"] for s in samples] else None,
            # Python objects alive (pymalloc blocks): flat with a rising RSS means pages the
            # allocators keep, rising means objects that stay
            "py_blocks_series": series["py_blocks"] if None not in series["py_blocks"] else None,
            "tts_arena_shrinks_series": shrinks if None not in shrinks else None,
            "slopes_per_100_turns": {k: slope_per_100(v) for k, v in series.items() if k != "rss_mb"},
            "during": {k: [min(v), max(v)] for k, v in series.items() if v and None not in v},
            "free_blocks": [blocks0, getattr(engine, "num_free_blocks", None)],
            "num_blocks": getattr(engine, "num_blocks", None),
            "tasks": [tasks0, len(asyncio.all_tasks())], "threads": [threads0, threading.active_count()],
            "p50_ms": float(np.median([p["p50_ms"] for p in per if p["p50_ms"] is not None] or [np.nan])),
            "p90_ms": float(np.median([p["p90_ms"] for p in per if p["p90_ms"] is not None] or [np.nan])),
            "last_budget_complete": all(p["last_budget_complete"] for p in per),
            "full_collections": full.count, "full_collection_max_ms": round(full.max_ms, 1), "per_session": per}


def table(levels: list[dict]) -> str:
    rows = ["sessions turns answered lost errors  p50_ms  p90_ms  rss_slope/100  blocks      tasks   threads"]
    for r in levels:
        rows.append(f"{r['sessions']:8d} {r['sessions'] * r['turns_per_session']:5d} {r['answered']:8d} "
                    f"{r['lost']:4d} {r['errors']:6d} {r['p50_ms']:7.0f} {r['p90_ms']:7.0f} "
                    f"{r['rss_slope_mb_per_100_turns'] or 0:14.2f}  {r['free_blocks']!s:10s} "
                    f"{r['tasks']!s:7s} {r['threads']}")
    return "\n".join(rows)


def run(turns: int, sessions: list[int], real: bool, speed: float = 1.0, freeze: bool = True) -> dict:
    cfg, comps = components(real)
    audio = speech()
    # as the `parley` commands do once their models have loaded (pipeline/allocator.py), with
    # the session code imported first, as they have: livekit and what it imports (~115k objects)
    # left unfrozen made a full collection walk them (45 ms a turn) and come ~100 turns apart
    import pipeline.session  # noqa: F401

    frozen = freeze_loaded_objects() if freeze else 0
    try:
        levels = [asyncio.run(level(cfg, comps, audio, n, turns, speed)) for n in sessions]
    finally:
        comps.close()
    gc.collect()
    unfrozen = len(gc.get_objects())  # what a full collection walks now that the sessions are gone
    return {"benchmark": "soak", "real_models": real, "turns_per_session": turns, "speed": speed,
            "cpu": cpu_model(), "allocator": allocator_in_use(),
            # "malloc": CPython's small objects on the allocator too (then in heap_mb), not pymalloc's arenas
            "python_allocator": os.environ.get("PYTHONMALLOC") or "pymalloc", "gc_frozen_objects": frozen,
            "gc_unfrozen_objects": unfrozen,
            "levels": levels}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=20, help="turns per session (200 for the full soak)")
    p.add_argument("--sessions", default="1,4,8", help="comma-separated concurrency levels")
    p.add_argument("--real", action="store_true", help="the embedded models instead of timed fakes")
    p.add_argument("--speed", type=float, default=1.0,
                   help="run the conversation this many times faster than real time: the question "
                        "and the silence pushed, the reply played (perceived latency is only "
                        "comparable at 1.0)")
    p.add_argument("--no-freeze", action="store_true",
                   help="leave the loaded objects to the garbage collector (the `parley` commands freeze them)")
    p.add_argument("--out", help="write the JSON here")
    a = p.parse_args(argv)
    sessions = [int(s) for s in a.sessions.split(",")]
    if a.turns < 1 or any(n < 1 for n in sessions) or not 0.5 <= a.speed <= 8:
        raise SystemExit("--turns and every --sessions level must be >= 1, --speed in [0.5, 8]")
    result = run(a.turns, sessions, a.real, a.speed, freeze=not a.no_freeze)
    print(table(result["levels"]))
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    reexec_under_jemalloc()  # as `parley` does: a long run on glibc malloc measures its arenas
    main()
