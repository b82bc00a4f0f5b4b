"""TTS benchmark: time to the first audio frame from the first text delta, for replies streamed
at 30 tokens/s, p50/p90; real-time factor; the silence left between chunks; per backend.
Prints a table and writes JSON.

    python -m benchmarks.tts [--backends piper,espeak] [--runs 3] [--tps 30] [--json out.json]

Targets (2-core CPU): first audio p50 <= 120 ms, Piper RTF <= 0.2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import statistics
import threading
import time

from tts import ChunkerConfig, StreamConfig, create_synthesizer
from tts.text_feed import feed_text, llm_deltas

# replies shaped like a voice agent's: a short opener, or none, then a sentence or two
REPLIES = (
    "Sure, I can help with that. What time would you like the appointment?",
    "Of course. Dr. Smith has an opening at 7:30 tomorrow morning, if that works for you.",
    "The total comes to $5.20, including tax, and it ships in 3 to 5 days.",
    "Well, it depends on the weather, but the hike usually takes about two hours.",
    "That sounds great! I've added it to your calendar for March 3rd at 10:15 a.m.",
    "The capital of Australia is Canberra, not Sydney as many people think.",
    "Hmm, let me check. About 45% of the orders arrived on time last week.",
    "Yes. Your flight leaves at 6 pm from gate 12, so plan to arrive early.",
    "I'm sorry, I didn't catch that. Could you say it again, please?",
    "Pi is roughly 3.14, e.g. a little more than three, and it never ends.",
)
TARGET_FIRST_AUDIO_P50_MS, TARGET_PIPER_RTF = 120.0, 0.2
UNDERRUN_MS = 100.0  # a reply whose chunks left the listener more silence than this, counted


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def run_reply(synth, text: str, tps: float, rate: int, first_words: int) -> dict:
    stream = synth.stream(StreamConfig(sample_rate=rate, chunker=ChunkerConfig(first_max_words=first_words)))
    calls0, audio0, secs0 = synth.stats.calls, synth.stats.audio_s, synth.stats.seconds
    feeder = threading.Thread(target=feed_text, args=(stream, text, tps))
    feeder.start()
    n_frames = sum(1 for _ in stream)
    feeder.join()
    first = stream.metrics.chunks[0]
    audio_s, secs = synth.stats.audio_s - audio0, synth.stats.seconds - secs0
    return {
        "first_audio_ms": stream.metrics.first_frame_s * 1000,
        "first_chunk_ready_ms": first.ready_s * 1000,  # the chunker's share (waiting for text)
        "first_chunk_synth_ms": first.synth_s * 1000,  # the backend's share
        "first_chunk": first.text,
        "chunks": synth.stats.calls - calls0,
        "audio_s": audio_s,
        "rtf": secs / audio_s if audio_s else 0.0,
        "frames": n_frames,
        "underrun_ms": stream.metrics.underrun_s * 1000,  # silence between chunks, heard in real time
    }


def bench_backend(name: str, runs: int, tps: float, rate: int, threads: int, first_words: list[int]) -> list[dict]:
    t = time.perf_counter()
    synth = create_synthesizer(name, threads=threads)
    load_s = time.perf_counter() - t
    synth.warmup()
    rows: dict[int, list[dict]] = {n: [] for n in first_words}
    for _ in range(runs):  # the settings interleaved, so machine noise hits them alike
        for text in REPLIES:
            for n in first_words:
                rows[n].append(run_reply(synth, text, tps, rate, n))
    return [_summary(name, n, load_s, rows[n]) for n in first_words]


def _summary(name: str, first_words: int, load_s: float, rows: list[dict]) -> dict:
    first = [r["first_audio_ms"] for r in rows]
    audio_s = sum(r["audio_s"] for r in rows)
    return {
        "backend": name, "first_words": first_words, "load_s": load_s, "replies": len(rows),
        "first_audio_ms_p50": statistics.median(first), "first_audio_ms_p90": _pct(first, 0.9),
        "first_chunk_ready_ms_p50": statistics.median(r["first_chunk_ready_ms"] for r in rows),
        "first_chunk_synth_ms_p50": statistics.median(r["first_chunk_synth_ms"] for r in rows),
        "rtf_p50": statistics.median(r["rtf"] for r in rows), "rtf_p90": _pct([r["rtf"] for r in rows], 0.9),
        "rtf_total": sum(r["rtf"] * r["audio_s"] for r in rows) / audio_s, "audio_s_total": audio_s,
        "underrun_ms_max": max(r["underrun_ms"] for r in rows),
        "replies_with_underrun": sum(r["underrun_ms"] > UNDERRUN_MS for r in rows),
        "rows": rows,
    }


def _table(results: list[dict]) -> str:
    cols = ("backend", "first_words", "replies", "first_audio_ms_p50", "first_audio_ms_p90", "first_chunk_ready_ms_p50",
            "first_chunk_synth_ms_p50", "rtf_p50", "rtf_p90", "rtf_total", "underrun_ms_max", "replies_with_underrun")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) and v < 1 else (f"{v:.1f}" if isinstance(v, float) else str(v))  # noqa: E731
    rows = [[fmt(r[c]) for c in cols] for r in results]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _busy(n: int) -> tuple[list, object]:
    """`n` processes spinning on a core each: the STT and LLM that share the CPU in a session."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs, stop


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="piper,espeak")
    ap.add_argument("--runs", type=int, default=3, help="passes over the reply set")
    ap.add_argument("--tps", type=float, default=30.0, help="LLM tokens (deltas) per second")
    ap.add_argument("--rate", type=int, default=24_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--first-words", default="2,3", help="ChunkerConfig.first_max_words values to compare")
    ap.add_argument("--busy-cores", type=int, default=0, help="cores kept busy by spinning processes")
    ap.add_argument("--json", default="", help="write the results here")
    args = ap.parse_args(argv)
    first_words = [int(n) for n in args.first_words.split(",")]
    procs, stop = _busy(args.busy_cores)
    try:
        results = [r for b in args.backends.split(",")
                   for r in bench_backend(b, args.runs, args.tps, args.rate, args.threads, first_words)]
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=2)
    print(_table(results))
    for r in results:
        ok_first = r["first_audio_ms_p50"] <= TARGET_FIRST_AUDIO_P50_MS
        line = f"{r['backend']} (first_words={r['first_words']}): first audio p50 {r['first_audio_ms_p50']:.0f} ms (target <= 120: {'met' if ok_first else 'MISSED'})"
        if r["backend"] == "piper":
            ok_rtf = r["rtf_total"] <= TARGET_PIPER_RTF
            line += f", RTF {r['rtf_total']:.3f} (target <= 0.2: {'met' if ok_rtf else 'MISSED'})"
        print(line)
    if args.json:
        meta = {"tps": args.tps, "busy_cores": args.busy_cores, "rate": args.rate, "threads": args.threads, "runs": args.runs,
                "deltas_per_reply_mean": statistics.mean(len(llm_deltas(t)) for t in REPLIES),
                "python": platform.python_version(), "machine": platform.machine()}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
