"""The voice latency benchmark: what a user hears, measured on one audio timeline.

    parley bench voice --data DIR --out OUTDIR [--config FILE] [--compare NAME=FILE ...] [--turns N]

Each clip of DIR (benchmarks/voice_data.py: one conversation, name order) is played in real
time, 20 ms frames paced on the wall clock, into one voice session per configuration (built by
pipeline.session; the benchmark sees only the pipeline/transport.py boundary). Each clip starts
GAP_S after the agent's previous reply finished playing. Per turn, from the audio
(benchmarks/voice_score.py): perceived latency, false cutoffs, replies to half a sentence, and
the session's budget stages; OUTDIR gets report.json, report.md, the plots and one stereo WAV
per clip (benchmarks/voice_report.py). `--compare` runs more configurations on the same clips
in the same run, for ratios measured side by side."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.voice_data import VoiceClip, load_conversation
from benchmarks.voice_score import db_to_amplitude, first_audible, score_turn
from benchmarks.voice_timeline import Timeline
from parley.audio import ENGINE_RATE
from parley.errors import ParleyError
from pipeline.transport import SessionFactory, SessionHandle

FRAME = 320  # 20 ms at 16 kHz
DEFAULT_NAME = "parley"  # the first column when no --config is given: SessionConfig()
FactoryMaker = Callable[[], SessionFactory]  # called right before its configuration runs


@dataclass(frozen=True)
class ReplayOptions:
    silence_db: float = -40.0  # agent samples at or above this (dBFS) are audible
    gap_s: float = 0.3  # user silence after the agent's reply ended, before the next clip
    quiet_s: float = 0.4  # the reply is over when no agent frame came for this long
    no_reply_s: float = 8.0  # after turn_end, give up waiting for a reply to start
    max_turn_s: float = 30.0  # after turn_end, stop waiting for the reply to end

    def __post_init__(self) -> None:
        if not -90.0 <= self.silence_db < 0.0:
            raise ValueError(f"silence_db must be in [-90, 0) dBFS, got {self.silence_db}")
        for name in ("gap_s", "quiet_s", "no_reply_s", "max_turn_s"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_turn_s < self.no_reply_s:
            raise ValueError("max_turn_s must be >= no_reply_s")


class _Recorder:
    """The session's two callbacks, writing to the clip being played."""

    def __init__(self) -> None:
        self.timeline: Timeline | None = None
        self.state: str | None = None

    def on_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        if self.timeline is not None:
            self.timeline.add_agent(pcm, sample_rate, time.monotonic())

    def on_event(self, event: dict) -> None:
        now = time.monotonic()
        if event.get("type") == "state":
            self.state = event.get("agent")
        if self.timeline is not None:
            if event.get("type") == "interrupt":
                self.timeline.interrupt(now)
            self.timeline.add_event(dict(event), now)


def _finished(clip: VoiceClip, tl: Timeline, rec: _Recorder, opts: ReplayOptions, now: float) -> str | None:
    """Once the clip's audio is all pushed: "replied", "no_reply", "timeout" or None (wait)."""
    since_end = tl.seconds(now) - clip.turn_end
    last = tl.last_agent_arrival
    replied = last is not None and last > clip.turn_end
    idle = rec.state in (None, "listening") and not tl.agent_playing(now)
    if replied and idle and tl.seconds(now) - last >= opts.quiet_s:
        return "replied"
    if not replied and since_end >= opts.no_reply_s and rec.state != "speaking":
        return "no_reply"
    return "timeout" if since_end >= opts.max_turn_s else None


async def _push_until(handle: SessionHandle, tl: Timeline, audio: np.ndarray, stop) -> float:
    """Push `audio` then silence, paced, until stop(now) is true after the audio; -> the
    largest lateness of a push (s): a stalled machine shows here, not as a hidden error."""
    silence = np.zeros(FRAME, dtype=np.float32)
    pos, lag = 0, 0.0
    while True:
        chunk = audio[pos : pos + FRAME] if pos < len(audio) else silence
        due = tl.t0 + (tl.user_samples + len(chunk)) / ENGINE_RATE
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            lag = max(lag, -delay)
        handle.push_audio(chunk, ENGINE_RATE)
        tl.add_user(chunk)
        pos += len(chunk)
        if pos >= len(audio) and stop(time.monotonic()):
            return lag


async def _settle(handle: SessionHandle, rec: _Recorder, opts: ReplayOptions) -> float:
    """Before the first clip: silence until the agent is quiet (a session may greet first; its
    greeting would otherwise count as a false cutoff of turn 1), at least gap_s, at most
    max_turn_s. -> the monotonic time the first clip starts."""
    tl = rec.timeline = Timeline(time.monotonic())
    floor = tl.t0 + opts.gap_s

    def quiet(now: float) -> bool:
        last = tl.last_agent_arrival
        idle = rec.state in (None, "listening") and not tl.agent_playing(now)
        settled = idle and (last is None or tl.seconds(now) - last >= opts.quiet_s)
        return (now >= floor and settled) or tl.seconds(now) >= opts.max_turn_s

    await _push_until(handle, tl, np.zeros(0, np.float32), quiet)
    return tl.t0 + tl.user_samples / ENGINE_RATE


async def replay(factory: SessionFactory, clips: Sequence[VoiceClip], opts: ReplayOptions,
                 on_turn: Callable[[int, VoiceClip, Timeline], None] | None = None) -> list[tuple[Timeline, dict]]:
    """Play the conversation into one session -> per clip (timeline, {"end", "push_lag_ms"})."""
    rec = _Recorder()
    handle = await factory(rec.on_audio, rec.on_event)
    out = []
    try:
        t0 = await _settle(handle, rec, opts)
        for k, clip in enumerate(clips):
            tl = rec.timeline = Timeline(t0)
            meta: dict = {"end": None}

            def stop(now, clip=clip, tl=tl, meta=meta) -> bool:
                meta["end"] = _finished(clip, tl, rec, opts, now)
                return meta["end"] is not None

            lag = await _push_until(handle, tl, clip.audio, stop)
            gap_end = time.monotonic() + opts.gap_s
            lag = max(lag, await _push_until(handle, tl, np.zeros(0, np.float32), lambda now, e=gap_end: now >= e))
            meta["push_lag_ms"] = round(1000 * lag, 1)
            meta["timeline_s"] = round(tl.length / ENGINE_RATE, 3)
            out.append((tl, meta))
            t0 = tl.t0 + tl.user_samples / ENGINE_RATE
            if on_turn is not None:
                on_turn(k, clip, tl)
    finally:
        rec.timeline = None
        await handle.aclose()
    return out


def select_turns(clips: list[VoiceClip], turns: int | None) -> list[VoiceClip]:
    """The first `turns` clips; past the end the conversation goes round again (NAME-r2...)."""
    if turns is None:
        return list(clips)
    if turns < 1:
        raise ValueError(f"--turns must be >= 1, got {turns}")
    return [clips[i % len(clips)] if i < len(clips) else
            replace(clips[i % len(clips)], name=f"{clips[i % len(clips)].name}-r{i // len(clips) + 1}")
            for i in range(turns)]


def _progress(config: str, total: int, threshold: float) -> Callable[[int, VoiceClip, Timeline], None]:
    """A one-line progress bar on stderr with the last turn's first-audio delay."""
    def show(k: int, clip: VoiceClip, tl: Timeline) -> None:
        done = k + 1
        bar = "#" * (20 * done // total) + "-" * (20 - 20 * done // total)
        first = first_audible(tl.agent_track(), threshold)
        heard = "no reply" if first is None else f"{1000 * (first / ENGINE_RATE - clip.turn_end):+.0f} ms"
        print(f"\r{config}: [{bar}] {done}/{total} {clip.name[:24]:24s} {heard:>10s}",
              end="" if done < total else "\n", file=sys.stderr, flush=True)
    return show


def run_config(factory: SessionFactory, clips: list[VoiceClip], opts: ReplayOptions,
               on_turn=None) -> tuple[list[dict], list[Timeline]]:
    """Replay the clips into one session (its own event loop) -> (report rows, timelines)."""
    played = asyncio.run(replay(factory, clips, opts, on_turn))
    threshold = db_to_amplitude(opts.silence_db)
    rows = []
    for clip, (tl, meta) in zip(clips, played):
        rows.append({**score_turn(clip, tl.agent_track(), tl.events, threshold, tl.t0), **meta})
    return rows, [tl for tl, _ in played]


def run(data: str | Path, out: str | Path, sessions: Mapping[str, FactoryMaker], *, turns: int | None = None,
        options: ReplayOptions | None = None, progress: bool = True) -> dict:
    """Every configuration on the same clips, in order; the first is the reference of the
    ratios. Writes OUTDIR (see the module docstring) and returns report.json's content."""
    from benchmarks import voice_report

    if not sessions:
        raise ValueError("at least one session configuration is needed")
    opts = options or ReplayOptions()
    clips, skipped = load_conversation(data)
    for s in skipped:
        print(f"skipped {s['name']}: {s['reason']}", file=sys.stderr)
    clips = select_turns(clips, turns)
    out = Path(out)
    results, failed = {}, {}
    for i, (name, make) in enumerate(sessions.items()):
        show = _progress(name, len(clips), db_to_amplitude(opts.silence_db)) if progress else None
        try:
            rows, timelines = run_config(make(), clips, opts, show)
        except Exception as e:  # a compared configuration that cannot run must not lose the others
            if i == 0:
                raise
            failed[name] = f"{type(e).__name__}: {e}"
            print(f"{name}: failed, left out of the report: {failed[name]}", file=sys.stderr)
            continue
        wav_dir = out if i == 0 else out / name
        for clip, tl in zip(clips, timelines):
            voice_report.write_stereo(wav_dir / f"{clip.name}.wav", tl)
        results[name] = rows
    return voice_report.write_report(out, results, skipped, opts, data=str(data), failed=failed)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse_compare(specs: Sequence[str], first: str) -> dict[str, Path]:
    """["NAME=FILE", ...] -> {NAME: FILE}; names are unique, file-name safe, not `first`."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq or not _NAME.match(name) or not path:
            raise ValueError(f"--compare takes NAME=FILE (NAME of letters, digits, _.-), got {spec!r}")
        if name in out or name == first:
            raise ValueError(f"--compare name {name!r} is used twice")
        if not Path(path).is_file():
            raise FileNotFoundError(f"--compare {name}: no such file {path}")
        out[name] = Path(path)
    return out


def session_makers(config: str | None, compare: Sequence[str]) -> dict[str, FactoryMaker]:
    """The real sessions: SessionConfig() (or --config FILE) first, then each --compare."""
    first = Path(config).stem if config else DEFAULT_NAME
    if config and not Path(config).is_file():
        raise FileNotFoundError(f"--config: no such file {config}")
    files = {first: Path(config) if config else None, **parse_compare(compare, first)}

    def maker(path: Path | None) -> FactoryMaker:
        def make() -> SessionFactory:
            try:
                from pipeline.allocator import freeze_loaded_objects
                from pipeline.session import SessionConfig, load_components, session_factory
            except ImportError as e:
                raise ParleyError(f"the voice session (pipeline.session) is not available: {e}") from e
            config = SessionConfig.from_toml(path) if path else SessionConfig()
            components = load_components(config)
            # what the `parley` commands do once their models load (pipeline/allocator.py): left
            # to the collector, the models' objects were walked by the full collection after each
            # reply, on the event loop: 220-290 ms a reply, where the session the user talks to
            # spends ~3 ms (asyncio debug log, the held-out conversation, model 167)
            freeze_loaded_objects()
            return session_factory(config, components)
        return make

    return {name: maker(path) for name, path in files.items()}


def main(argv: list[str] | None = None, prog: str | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="conversation directory (NAME.wav + NAME.json, name order)")
    ap.add_argument("--out", required=True, help="output directory (report.json, report.md, plots, WAVs)")
    ap.add_argument("--config", help="session configuration (TOML); default: Parley's defaults")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=FILE",
                    help="another configuration run on the same clips (repeatable)")
    ap.add_argument("--turns", type=int, help="play N turns (the conversation repeats past its end)")
    ap.add_argument("--silence-db", type=float, default=ReplayOptions.silence_db,
                    help="agent audio at or above this level (dBFS) is audible (default %(default)s)")
    ap.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    args = ap.parse_args(argv)
    report = run(args.data, args.out, session_makers(args.config, args.compare), turns=args.turns,
                 options=ReplayOptions(silence_db=args.silence_db), progress=not args.no_progress)
    from benchmarks.voice_report import format_table

    print(format_table(report))
    print(f"wrote {Path(args.out) / 'report.md'}")
    return report


if __name__ == "__main__":
    main()
