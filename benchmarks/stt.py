"""Streaming STT benchmark: real-time-paced replay of synthesized 2-10 s utterances.

Per utterance: replay at real time (or --fast: no sleeping, every due decode done), flush
each `--flush-delay` after the speech ends (the endpointing allotment; the turn is replayed
once per delay), and measure finalization latency (flush -> final), the share of finals that
needed no decode of their own, interim cadence, real-time factor, process CPU / wall while
streaming, WER and lost tail words; then the same clips offline (one-shot) in the same run.

Clips (--voices): "held-out" (default), voices the STT was never tuned on, Debian's `flite`
(kal, kal16, awb, rms, slt) and `festival` (kal_diphone, ked_diphone, cmu_us_slt_arctic_hts:
packages festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts) on sentences with
word splits (tablespoons, $5.20, numbers, contractions), some ending right after a pause;
"piper": the embedded Piper voice (and espeak-ng) the defaults were tuned on; "long": the
held-out voices on turns of two or three sentences (7-11 s).

    python -m benchmarks.stt [--voices held-out|piper|long] [--fast] [--pauses] [--flush-delay 0.25 0.15]
                             [--model whisper-tiny.en] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import time

import jiwer
import numpy as np

from benchmarks.voice_report import cpu_model

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
# held-out turns: (text, pause after the first part or None). Each is spoken by the next voice
# of HELD_OUT_VOICES in turn; a paused turn is its two parts synthesized apart, 0.5 s between.
HELD_OUT_TEXTS = (
    ("Do you have any tips for a beginner?", None),
    ("I need three tablespoons of sugar for the cake.", None),
    ("My flight leaves from the airport tomorrow at seven.", None),
    ("The coffee costs $5.20 at the corner shop.", None),
    ("I can't find my keys, and I'm already late for work.", None),
    ("Set a timer for twenty five minutes.", None),
    ("What's the fastest way to get to the train station?", None),
    ("We'll need about 300 grams of flour and two eggs.", None),
    ("Could you read me the news headlines from this morning?", None),
    ("My daughter's birthday party is on the fourteenth of March.", None),
    ("How long should I boil an egg for a soft yolk?", None),
    ("Please add tomatoes, onions and garlic to my shopping list.", None),
    ("It doesn't matter which one you pick.", None),
    ("Tell me a short story about a dragon who loves books.", None),
    ("I wonder if it will snow this weekend in the mountains.", None),
    ("Call the dentist and move my appointment to Thursday afternoon.", None),
    ("The total was $5.20", "including tax."),
    ("I want to learn the guitar.", "Where do I start?"),
    ("Book a table for four.", "At eight."),
    ("Turn off the kitchen lights.", "And the fan."),
    ("I'll take the blue one.", "No, the green one."),
)
HELD_OUT_VOICES = (("flite", "slt"), ("festival", "kal_diphone"), ("flite", "awb"), ("festival", "cmu_us_slt_arctic_hts"),
                   ("flite", "rms"), ("festival", "ked_diphone"), ("flite", "kal16"))
# --voices long: turns of two or three sentences (7-11 s), spoken by HELD_OUT_VOICES in turn,
# where a pause decode of the whole utterance is slow
LONG_TEXTS = (
    "I'm going to my cousin's wedding in Seattle next month. Could you remind me to book the hotel this "
    "weekend, before the prices go up?",
    "My laptop keeps restarting whenever I open more than three programs. I already updated everything, so "
    "what else should I try?",
    "We want to cook something special for our anniversary on Saturday. Something with fish would be nice, "
    "but nothing too complicated.",
    "The heating bill this winter was almost twice as high as last year. Can you help me figure out where the "
    "energy is going?",
    "Please write a short note to the neighbors. Tell them we are having a small party on Friday night, and "
    "that it will end before eleven.",
    "I have been trying to learn Spanish for about six months now. I can read quite well, but I still find it "
    "hard to understand people when they speak quickly.",
    "Our flight lands at half past nine in the evening. Is there still a train into the city at that time, or "
    "should we take a taxi?",
    "My son has a science test on Monday about the solar system. He keeps mixing up the planets, so could you "
    "give him an easy way to remember their order?",
)
ESPEAK_TEXTS = ("Please turn off the lights in the kitchen and lock the front door.",
                "How many kilometers is it from Paris to Berlin by train?")


def _norm(s: str) -> str:
    """Lower case words, numbers spelled out as the TTS reads them ("at 7." = "at seven.",
    "$5.20" = "five dollars and twenty cents"), so a digit is no error, nor a lost tail."""
    from tts.normalize import normalize_text

    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", normalize_text(s).lower()).split())


def wer(refs: list[str], hyps: list[str]) -> float:
    return 100.0 * jiwer.wer([_norm(r) for r in refs], [_norm(h) or "<empty>" for h in hyps])


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def synthesize(engine: str, voice: str, text: str) -> np.ndarray:
    """Debian flite (`flite -voice NAME`) or festival (`text2wave`, `(voice_NAME)`) -> 16 kHz [N]."""
    import subprocess
    import tempfile
    from pathlib import Path

    from parley.audio import validate_audio
    from parley.wav import read_wav

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "speech.wav"
        if engine == "flite":
            cmd, stdin = ["flite", "-voice", voice, "-t", text, "-o", str(out)], None
        else:
            cmd, stdin = ["text2wave", "-eval", f"(voice_{voice})", "-o", str(out)], text.encode()
        subprocess.run(cmd, input=stdin, check=True, capture_output=True, timeout=60)
        audio, rate = read_wav(out)
    return validate_audio(audio, rate)


def speech_end_s(audio: np.ndarray) -> float:
    """End of the last 10 ms frame louder than 2% of the clip's loudest (synthesizers end with
    some near-silence of their own)."""
    n = len(audio) // 160
    rms = np.sqrt((audio[:n * 160].reshape(n, 160) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > 0.02 * rms.max())
    return (loud[-1] + 1) * 0.01 if len(loud) else 0.0


def clips(voices: str = "held-out", pauses: bool = False) -> list[tuple[str, np.ndarray, float]]:
    """(text, 16 kHz audio trimmed after its speech end, voice label) per turn."""
    if voices == "long":
        out = []
        for i, text in enumerate(LONG_TEXTS):
            engine, voice = HELD_OUT_VOICES[i % len(HELD_OUT_VOICES)]
            out.append((text, synthesize(engine, voice, text), f"{engine}-{voice}"))
    elif voices == "held-out":
        out = []
        for i, (first, second) in enumerate(HELD_OUT_TEXTS):
            engine, voice = HELD_OUT_VOICES[i % len(HELD_OUT_VOICES)]
            audio = synthesize(engine, voice, first)
            text = first
            if second:
                audio = np.concatenate([audio[:int(speech_end_s(audio) * 16_000)], np.zeros(8000, np.float32),
                                        synthesize(engine, voice, second)])
                text = f"{first} {second}"
            out.append((text, audio, f"{engine}-{voice}"))
    else:
        from tests.speech import espeak_available, espeak_speech, piper_speech

        out = [(t, piper_speech(t), "piper") for t in TEXTS + (PAUSE_TEXTS if pauses else ())]
        if espeak_available():
            out += [(t, espeak_speech(t), "espeak") for t in ESPEAK_TEXTS]
    return [(t, a[:int(speech_end_s(a) * 16_000)], v) for t, a, v in out]


def tail_lost(ref: str, hyp: str) -> bool:
    """The reference's last word is not among the transcript's last two words."""
    r, h = _norm(ref).split(), _norm(hyp).split()
    return bool(r) and r[-1] not in h[-2:]


def stream_one(st, audio: np.ndarray, before_s: float, flush_delay_s: float, realtime: bool, log=None) -> dict:
    """Replay one turn and flush `flush_delay_s` after its speech; `log`: the transcriber's
    DecodeLog, for the turn's timeline (benchmarks.stt_timeline)."""
    from benchmarks.stt_timeline import turn_timeline
    from stt import replay
    from tests.speech import with_silence

    x = with_silence(audio, before_s, flush_delay_s + 0.5)
    speech_end = before_s + len(audio) / 16_000
    if log is not None:
        log.take()
    clock0 = st._clock  # the transcriber's stream time goes on across turns
    t0 = time.perf_counter()  # replay's stream time 0 (to well under a ms)
    r = replay(st, x, realtime=realtime, flush_at_s=speech_end + flush_delay_s)
    st.wait_idle(10)  # abandoned decodes finish before the next turn
    interims = [e for e in r.events if e.kind in ("interim", "preflight")]
    preflights = [e for e in interims if e.kind == "preflight"]
    # ms after the speech end each preflight came
    after = [1000 * (e.audio_time_s - clock0 + e.latency_s - speech_end) for e in preflights]
    ends = [(ms, e) for ms, e in zip(after, preflights) if ms >= 0]
    gaps = [b.audio_time_s - a.audio_time_s for a, b in itertools.pairwise(interims)]
    decode = sum(e.decode_s for e in r.events) + r.final.decode_s
    out = {"final": r.final.text, "final_latency_s": r.final.latency_s, "final_decode_s": r.final.decode_s,
           "no_new_decode": r.final.decode_s == 0.0,
           "interims": len(interims), "preflight": bool(preflights),
           # when the last preflight came, after the speech (before the flush, or it has none)
           "preflight_ms": after[-1] if preflights else None,
           # ...and the first one after the speech (a greedy draft's, with draft_preflight), and
           # whether a reply asked on it would stand: it says the final's words
           "end_preflight_ms": ends[0][0] if ends else None,
           "end_preflight_final": bool(ends) and _norm_words(ends[0][1].text) == _norm_words(r.final.text),
           "interim_gap_s": statistics.median(gaps) if gaps else None,
           "interim_latency_s": statistics.median([e.latency_s for e in interims]) if interims else None,
           "decode_s": decode, "wall_s": r.wall_s, "cpu_s": r.cpu_s}
    if log is not None:
        out["timeline"] = turn_timeline(log.take(), t0, speech_end, flush_delay_s, r.final.latency_s, clock0)
    return out


def _norm_words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def summarize(rows: list[dict], delay: float) -> dict:
    from benchmarks.stt_timeline import summarize_timelines

    lat = [r["final_latency_s"] for r in rows]
    gaps = [r["interim_gap_s"] for r in rows if r["interim_gap_s"] is not None]
    audio_s = sum(r["duration_s"] for r in rows)
    refs = [r["text"] for r in rows]
    out = {
        "flush_delay_s": delay,
        "final_latency_ms_p50": 1000 * pct(lat, 50), "final_latency_ms_p90": 1000 * pct(lat, 90),
        "final_no_new_decode_share": sum(r["no_new_decode"] for r in rows) / len(rows),
        "interim_gap_s_median": statistics.median(gaps) if gaps else None,
        "interim_latency_ms_median": 1000 * statistics.median(
            [r["interim_latency_s"] for r in rows if r["interim_latency_s"] is not None] or [float("nan")]),
        "preflight_rate": sum(r["preflight"] for r in rows) / len(rows),
        **{f"preflight_ms_p{q}": pct(pre, q) if pre else None for q in (50, 90)
           for pre in [[r["preflight_ms"] for r in rows if r.get("preflight_ms") is not None]]},
        **{f"end_preflight_ms_p{q}": pct(pre, q) if pre else None for q in (50, 90)
           for pre in [[r["end_preflight_ms"] for r in rows if r.get("end_preflight_ms") is not None]]},
        "end_preflight_final_rate": sum(r.get("end_preflight_final", False) for r in rows) / len(rows),
        "stream_rtf": sum(r["decode_s"] for r in rows) / audio_s,
        "stream_cpu_cores": sum(r["cpu_s"] for r in rows) / sum(r["wall_s"] for r in rows),
        "wer_stream": wer(refs, [r["final"] for r in rows]),
        "tail_lost_stream": sum(tail_lost(r["text"], r["final"]) for r in rows),
        # ...of which offline kept the last word: lost by streaming itself (a cut, a stitch, too
        # little silence after the word), not by the model on this voice
        "tail_lost_stream_only": sum(tail_lost(r["text"], r["final"]) and not tail_lost(r["text"], r["offline"])
                                     for r in rows),
    }
    timelines = [r["timeline"] for r in rows if "timeline" in r]
    if timelines:
        out["timeline"] = summarize_timelines(timelines)
    return out


# --variant NAME: TranscriberConfig changes from the defaults, each replayed on the same turns
# in one run (turn by turn, so load changes hit every variant alike)
VARIANTS = {
    "default": {},
    "no-tentative": {"tentative_pause": False},  # the pause decode after endpoint_silence_s only
    "beam1": {"final_beam_size": 1},
    "beam2": {"final_beam_size": 2},
    "beam3": {"final_beam_size": 3},
    "beam5": {"final_beam_size": 5},
    "window6": {"min_window_s": 6.0},
    "window8": {"min_window_s": 8.0},
    "endpoint64": {"endpoint_silence_s": 0.06, "tentative_pause": False},
    "interim-beam1": {"beam_size": 1},
    "threads2": {"cpu_threads": 2},
    "pause-from-stable": {"pause_from_stable": True},
    "stable-after-4": {"pause_from_stable_after_s": 4.0},  # ...in a buffer of 4 s or more only
    "stable-after-6": {"pause_from_stable_after_s": 6.0},
    "stable-never": {"pause_from_stable_after_s": None},
    "commit-any": {"commit_min_probability": 0.0},  # LocalAgreement-2 alone (before 2026-12-07)
    "commit-p0.7": {"commit_min_probability": 0.7},
    "late-preflight": {"early_preflight": False},  # the preflight after the word alignment
    "no-draft": {"draft_preflight": False},  # no greedy draft's preflight before the beam's
}


def _config(args, changes: dict):
    from stt import TranscriberConfig

    base = {"model": args.model, "cpu_threads": args.threads, "endpoint_silence_s": args.endpoint_silence,
            "decode_workers": args.decode_workers, "final_beam_size": args.final_beam,
            "pause_from_stable": args.pause_from_stable, "restart_at_pause": args.restart_at_pause}
    return TranscriberConfig(**{**base, **changes})


def run(args) -> dict:
    from benchmarks.stt_timeline import DecodeLog
    from stt import StreamingTranscriber, WhisperDecoder, transcribe

    data = clips(args.voices, args.pauses)[:args.limit]
    configs = {v: _config(args, VARIANTS[v]) for v in args.variant}
    decoders: dict[tuple, WhisperDecoder] = {}  # one per encoder window and thread count
    logs, streams = {}, {}
    for v, cfg in configs.items():
        key = (cfg.min_window_s, cfg.cpu_threads, cfg.decode_workers, cfg.draft_preflight)
        decoders.setdefault(key, WhisperDecoder(cfg))
        logs[v] = DecodeLog()
        streams[v] = StreamingTranscriber(cfg, decoder=decoders[key], on_decode=logs[v])
    offline_decoder = next(iter(decoders.values()))
    rows: dict[str, dict[float, list[dict]]] = {v: {d: [] for d in args.flush_delay} for v in configs}
    offline = []
    try:
        for st in streams.values():
            stream_one(st, data[0][1], 0.3, 0.25, realtime=False)  # warm-up
        for text, audio, voice in data:
            t0 = time.perf_counter()
            off = transcribe(audio, model=args.model, decoder=offline_decoder)
            offline.append({"offline": off.text, "offline_s": time.perf_counter() - t0})
            for v, st in streams.items():
                for delay in args.flush_delay:
                    res = stream_one(st, audio, 0.3, delay, realtime=not args.fast, log=logs[v])
                    res.update(text=text, voice=voice, duration_s=len(audio) / 16_000, offline=off.text)
                    rows[v][delay].append(res)
                    print(f"{v[:14]:14s} {voice:30s} +{delay * 1000:3.0f} ms  final {res['final_latency_s'] * 1000:6.1f} "
                          f"ms (decode {res['final_decode_s'] * 1000:5.1f})  | {res['final']}", flush=True)
    finally:
        for st in streams.values():
            st.close()
    refs = [t for t, _, _ in data]
    audio_s = sum(len(a) / 16_000 for _, a, _ in data)
    first = args.variant[0]
    return {
        "model": args.model, "voices": args.voices, "endpoint_silence_s": args.endpoint_silence,
        "decode_workers": args.decode_workers, "final_beam_size": args.final_beam,
        "pause_from_stable": args.pause_from_stable, "restart_at_pause": args.restart_at_pause,
        "pauses": args.pauses, "threads": args.threads, "realtime": not args.fast, "clips": len(data),
        "audio_s": audio_s, "offline_rtf": sum(o["offline_s"] for o in offline) / audio_s,
        "wer_offline": wer(refs, [o["offline"] for o in offline]),
        "tail_lost_offline": sum(tail_lost(t, o["offline"]) for t, o in zip(refs, offline)),
        "by_flush_delay": [summarize(rows[first][d], d) for d in args.flush_delay],
        "variants": {v: {"config": VARIANTS[v], "by_flush_delay": [summarize(rows[v][d], d) for d in args.flush_delay]}
                     for v in configs},
        "rows": {v: {str(d): [{**r, **o} for r, o in zip(rows[v][d], offline)] for d in args.flush_delay}
                 for v in configs},
    }


def table(s: dict) -> str:
    from benchmarks.stt_timeline import timeline_table

    def line(k, v):
        return f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}"

    keys = ["model", "voices", "endpoint_silence_s", "decode_workers", "final_beam_size", "pause_from_stable",
            "restart_at_pause", "pauses", "threads", "realtime", "clips", "audio_s", "offline_rtf", "wer_offline",
            "tail_lost_offline"]
    out = [line(k, s[k]) for k in keys]
    for v, res in s["variants"].items():
        for d in res["by_flush_delay"]:
            out += ["", f"== {v} {res['config']}"]
            out += [line(k, x) for k, x in d.items() if k != "timeline"]
            if "timeline" in d:
                out.append(timeline_table(d["timeline"]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from stt import TranscriberConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="whisper-tiny.en", choices=["whisper-tiny.en", "whisper-base"])
    p.add_argument("--threads", type=int, default=1, help="CTranslate2 cpu_threads")
    p.add_argument("--fast", action="store_true", help="replay without real-time pacing (smoke runs)")
    p.add_argument("--voices", default="held-out", choices=["held-out", "piper", "long"], help="clip set (see above)")
    p.add_argument("--flush-delay", type=float, nargs="+", default=[0.25, 0.15],
                   help="flush this long after speech ends (s); each turn is replayed once per delay")
    p.add_argument("--decode-workers", type=int, default=TranscriberConfig.decode_workers)
    p.add_argument("--final-beam", type=int, default=TranscriberConfig.final_beam_size)
    p.add_argument("--endpoint-silence", type=float, default=TranscriberConfig.endpoint_silence_s,
                   help="pause (s) after which the utterance so far is decoded and made stable")
    p.add_argument("--pauses", action="store_true", help=f"piper: add {len(PAUSE_TEXTS)} turns with pauses between sentences")
    p.add_argument("--pause-from-stable", action="store_true", help="cut at pauses too (faster, less exact)")
    p.add_argument("--restart-at-pause", action="store_true", help="after a pause decode only the speech after it")
    p.add_argument("--variant", nargs="+", default=["default"], choices=list(VARIANTS),
                   help="configurations replayed side by side on the same turns (the first is the headline)")
    p.add_argument("--limit", type=int, default=None, help="only the first N turns (smoke runs)")
    p.add_argument("--json", help="write the summary and per-clip rows here")
    args = p.parse_args(argv)
    summary = run(args)
    print(table(summary))
    if args.json:
        summary["machine"] = {"cpu": cpu_model(), "cores": os.cpu_count() or 0, "load_avg_after": os.getloadavg()}
        summary["command"] = "python -m benchmarks.stt " + " ".join(sys.argv[1:] if argv is None else argv)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
