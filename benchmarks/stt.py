"""Streaming STT benchmark: real-time-paced replay of synthesized 2-10 s utterances.

Per utterance: replay at real time (or --fast: no sleeping, every due decode done), flush
`--flush-delay` after the speech ends (the endpointing allotment), and measure finalization
latency (flush -> final), interim cadence, real-time factor, process CPU / wall while
streaming, and WER; then the same clips offline (one-shot) in the same run.

    python -m benchmarks.stt [--fast] [--pauses] [--model whisper-tiny.en] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import time

import jiwer
import numpy as np

TEXTS = (
    "Hello there.",
    "What's the weather like today?",
    "Turn the lights off in the living room please.",
    "Could you book a table for two people at the Italian place tonight?",
    "I would like to change my flight to Wednesday because my meeting moved.",
    "Remind me to call my sister when I get home from work, and also to buy some milk on the way.",
    "Send a message to Alex saying that I will be ten minutes late for the meeting this afternoon.",
    "The weather tomorrow will be sunny in the morning and rainy in the afternoon, so bring an umbrella if "
    "you are going out after lunch.",
    "Can you play some relaxing music while I cook dinner?",
    "Please find me a recipe for a vegetarian lasagna that takes less than an hour to make.",
)
# --pauses: turns of several sentences, so speech pauses inside them (each pause commits the
# words so far) and short runs follow a pause; some say a word twice on purpose
PAUSE_TEXTS = (
    "The total comes to $5.20, including tax.",
    "I checked the receipt twice. The total comes to $5.20. Including tax.",
    "Your order is ready. It costs $19.99 and ships in 3 to 5 days.",
    "Thanks for waiting. The total comes to $5.20, including tax, and it ships in 3 to 5 days.",
    "I would like a large coffee please. How much is that? Including tax.",
    "No, no. I said Tuesday, not Thursday.",
    "Okay. Thank you. Thank you very much.",
    "Book a table for two. Make it seven thirty. Near the window.",
    "Call my mother. Tell her I will be late. Very late.",
    "Turn on the lights. Then turn off the music. Thanks.",
    "Set an alarm for six in the morning. Six, not seven.",
    "What is the weather like in Paris? And in London?",
    "Please send the report to Maria. She needs it by Friday.",
    "Yes. Yes, that is right. Go ahead.",
)
ESPEAK_TEXTS = ("Please turn off the lights in the kitchen and lock the front door.",
                "How many kilometers is it from Paris to Berlin by train?")


def _norm(s: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", s.lower()).split())


def wer(refs: list[str], hyps: list[str]) -> float:
    return 100.0 * jiwer.wer([_norm(r) for r in refs], [_norm(h) or "<empty>" for h in hyps])


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def clips(pauses: bool = False) -> list[tuple[str, np.ndarray, float]]:
    from tests.speech import espeak_available, espeak_speech, piper_speech

    out = [(t, piper_speech(t)) for t in TEXTS + (PAUSE_TEXTS if pauses else ())]
    if espeak_available():
        out += [(t, espeak_speech(t)) for t in ESPEAK_TEXTS]
    return [(t, a, len(a) / 16_000) for t, a in out]


def stream_one(st, audio: np.ndarray, before_s: float, flush_delay_s: float, realtime: bool) -> dict:
    from stt import replay
    from tests.speech import with_silence

    x = with_silence(audio, before_s, flush_delay_s + 0.5)
    speech_end = before_s + len(audio) / 16_000
    r = replay(st, x, realtime=realtime, flush_at_s=speech_end + flush_delay_s)
    interims = [e for e in r.events if e.kind in ("interim", "preflight")]
    gaps = [b.audio_time_s - a.audio_time_s for a, b in itertools.pairwise(interims)]
    decode = sum(e.decode_s for e in r.events) + r.final.decode_s
    return {"final": r.final.text, "final_latency_s": r.final.latency_s, "final_decode_s": r.final.decode_s,
            "interims": len(interims), "preflight": any(e.kind == "preflight" for e in interims),
            "interim_gap_s": statistics.median(gaps) if gaps else None,
            "interim_latency_s": statistics.median([e.latency_s for e in interims]) if interims else None,
            "decode_s": decode, "wall_s": r.wall_s, "cpu_s": r.cpu_s}


def run(args) -> dict:
    from stt import StreamingTranscriber, TranscriberConfig, transcribe

    data = clips(args.pauses)
    cfg = TranscriberConfig(model=args.model, cpu_threads=args.threads, endpoint_silence_s=args.endpoint_silence,
                            pause_from_stable=args.pause_from_stable, restart_at_pause=args.restart_at_pause)
    rows = []
    with StreamingTranscriber(cfg) as st:
        stream_one(st, data[0][1], 0.3, args.flush_delay, realtime=False)  # warm-up
        for text, audio, dur in data:
            res = stream_one(st, audio, 0.3, args.flush_delay, realtime=not args.fast)
            t0 = time.perf_counter()
            off = transcribe(audio, model=args.model, decoder=st._decoder)
            res.update(text=text, duration_s=dur, offline=off.text, offline_s=time.perf_counter() - t0)
            rows.append(res)
            print(f"{dur:5.1f}s  final {res['final_latency_s'] * 1000:6.1f} ms  interims {res['interims']:2d}  "
                  f"| {res['final']}", flush=True)
    lat = [r["final_latency_s"] for r in rows]
    audio_s = sum(r["duration_s"] for r in rows)
    refs = [r["text"] for r in rows]
    gaps = [r["interim_gap_s"] for r in rows if r["interim_gap_s"] is not None]
    return {
        "model": args.model, "endpoint_silence_s": args.endpoint_silence,
        "pause_from_stable": args.pause_from_stable, "restart_at_pause": args.restart_at_pause,
        "pauses": args.pauses, "threads": args.threads, "realtime": not args.fast, "clips": len(rows),
        "audio_s": audio_s, "flush_delay_s": args.flush_delay,
        "final_latency_ms_p50": 1000 * pct(lat, 50), "final_latency_ms_p90": 1000 * pct(lat, 90),
        "interim_gap_s_median": statistics.median(gaps) if gaps else None,
        "interim_latency_ms_median": 1000 * statistics.median(
            [r["interim_latency_s"] for r in rows if r["interim_latency_s"] is not None]),
        "preflight_rate": sum(r["preflight"] for r in rows) / len(rows),
        "stream_rtf": sum(r["decode_s"] for r in rows) / audio_s,
        "stream_cpu_cores": sum(r["cpu_s"] for r in rows) / sum(r["wall_s"] for r in rows),
        "offline_rtf": sum(r["offline_s"] for r in rows) / audio_s,
        "wer_stream": wer(refs, [r["final"] for r in rows]),
        "wer_offline": wer(refs, [r["offline"] for r in rows]),
        "rows": rows,
    }


def table(s: dict) -> str:
    keys = ["model", "endpoint_silence_s", "pause_from_stable", "restart_at_pause", "pauses", "threads", "realtime", "clips", "audio_s", "final_latency_ms_p50", "final_latency_ms_p90",
            "interim_gap_s_median", "interim_latency_ms_median", "preflight_rate", "stream_rtf",
            "stream_cpu_cores", "offline_rtf", "wer_stream", "wer_offline"]
    return "\n".join(f"{k:28s} {s[k]:.3f}" if isinstance(s[k], float) else f"{k:28s} {s[k]}" for k in keys)


def main(argv: list[str] | None = None) -> int:
    from stt import TranscriberConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="whisper-tiny.en", choices=["whisper-tiny.en", "whisper-base"])
    p.add_argument("--threads", type=int, default=1, help="CTranslate2 cpu_threads")
    p.add_argument("--fast", action="store_true", help="replay without real-time pacing (smoke runs)")
    p.add_argument("--flush-delay", type=float, default=0.25, help="flush this long after speech ends (s)")
    p.add_argument("--endpoint-silence", type=float, default=TranscriberConfig.endpoint_silence_s,
                   help="pause (s) after which the utterance so far is decoded and made stable")
    p.add_argument("--pauses", action="store_true", help=f"add {len(PAUSE_TEXTS)} turns with pauses between sentences")
    p.add_argument("--pause-from-stable", action="store_true", help="cut at pauses too (faster, less exact)")
    p.add_argument("--restart-at-pause", action="store_true", help="after a pause decode only the speech after it")
    p.add_argument("--json", help="write the summary and per-clip rows here")
    args = p.parse_args(argv)
    summary = run(args)
    print(table(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
