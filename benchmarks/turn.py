"""End-of-turn benchmark (eot-bench style): false-cutoff rate and latency per configuration
for our detector, VAD-only silence thresholds and LiveKit's v1-mini audio model.

Dataset: DIR/NAME.wav (16 kHz mono) + DIR/NAME.json {"text", "kind", "speech", "pauses",
"turn_end", optional "family"}. A decision before turn_end is a false cutoff; otherwise latency
= decision - turn_end, 3 s when no decision came. Clips are streamed in 20 ms frames. False
cutoffs are also counted apart on complete turns (only the speaker's own comma-length pauses)
and on paused ones (an inserted mid-sentence pause), and per synthesizer family.

With `stt=True` our detector runs with the real streaming STT in the loop: each clip is
replayed through stt.StreamingTranscriber in real time, and each interim / preflight text
reaches push_transcript when the session would have had it (`turn_stt.stt_timeline`)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from parley.audio import ENGINE_RATE, float_to_int16
from parley.wav import read_wav
from turn_detection import EndOfTurnDetector, EndpointingPolicy, VADConfig
from turn_detection.vad import SileroVAD

FRAME = 320  # 20 ms
NO_DECISION_S = 3.0
VAD_THRESHOLDS_S = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
V1_EVAL_SILENCE_S = 0.1  # v1-mini runs once the VAD has seen this much silence
V1_THRESHOLDS = (0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
V1_MAX_DELAYS_S = (0.8, 1.2, 2.0)
V1_WINDOW = 19_200  # 1.2 s, the most v1-mini takes
# Our shipped policy (chosen on validation clips, turn_detection/training/tune.py) is the one
# figure for "ours"; "ours-sweep" moves its two bars together in log-odds to trace the
# latency / false-cutoff curve, like the baselines' threshold sweeps (read on these clips).
SWEEP_SHIFTS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)


def sweep_policy(policy: EndpointingPolicy, shift: float) -> EndpointingPolicy:
    def move(p: float) -> float:
        p = min(max(p, 1e-4), 1 - 1e-4)
        return float(1 / (1 + math.exp(-(math.log(p / (1 - p)) + shift))))

    high, low = move(policy.high), move(policy.low)
    return replace(policy, high=high, low=min(low, high - 1e-4))


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray  # [N] float32 16 kHz
    turn_end: float
    kind: str
    family: str = ""
    text: str = ""


def load_dataset(directory: str | Path) -> list[Clip]:
    clips = []
    for meta_path in sorted(Path(directory).glob("*.json")):
        meta = json.loads(meta_path.read_text())
        audio, sr = read_wav(meta_path.with_suffix(".wav"))
        if sr != ENGINE_RATE or audio.ndim != 1:
            raise ValueError(f"{meta_path.stem}: need 16 kHz mono, got {sr} Hz shape {audio.shape}")
        clips.append(Clip(meta_path.stem, audio, float(meta["turn_end"]), meta["kind"],
                          str(meta.get("family", "")), str(meta.get("text", ""))))
    if not clips:
        raise ValueError(f"no NAME.json + NAME.wav clips in {directory}")
    return clips


def score(decisions: list[float | None], clips: list[Clip], by_family: bool = False) -> dict:
    """score_times, plus false cutoffs on complete / paused turns apart (and per family)."""
    out = score_times(decisions, [c.turn_end for c in clips])
    for kind in ("complete", "paused"):
        idx = [i for i, c in enumerate(clips) if c.kind == kind]
        if idx:
            cut = [decisions[i] is not None and decisions[i] < clips[i].turn_end for i in idx]
            out[f"false_cutoff_{kind}"] = float(np.mean(cut))
    families = sorted({c.family for c in clips if c.family})
    if by_family and len(families) > 1:
        out["families"] = {f: score([d for d, c in zip(decisions, clips) if c.family == f],
                                    [c for c in clips if c.family == f]) for f in families}
    return out


def score_times(decisions: list[float | None], turn_ends: list[float]) -> dict:
    """Decision times (None: never) vs each clip's turn end -> false-cutoff rate, latency stats."""
    cut = [d is not None and d < end for d, end in zip(decisions, turn_ends)]
    lat = np.array([NO_DECISION_S if d is None else d - end
                    for d, end, x in zip(decisions, turn_ends, cut) if not x])
    out = {"n": len(turn_ends), "false_cutoff_rate": float(np.mean(cut))}
    if len(lat):
        out.update(latency_mean_s=float(lat.mean()), latency_p50_s=float(np.percentile(lat, 50)),
                   latency_p90_s=float(np.percentile(lat, 90)))
    return out


def run_ours(clips: list[Clip], det: EndOfTurnDetector,
             timelines: list[list[tuple[float, str]]] | None = None) -> tuple[list[float | None], list[float]]:
    """-> decision times, and the CPU time of every push that ran the classifier. `timelines`:
    per clip the (arrival time, text) of the STT's interim / preflight events, handed to
    push_transcript before the first frame that starts at or after the arrival."""
    stream = det.stream()
    decisions, costs = [], []
    for k, c in enumerate(clips):
        stream.reset()
        when = None
        texts = list(timelines[k]) if timelines is not None else []
        for i in range(0, len(c.audio), FRAME):
            while texts and texts[0][0] <= i / ENGINE_RATE:
                stream.push_transcript(texts.pop(0)[1])
            n_eval = len(stream.evaluations)
            t0 = time.thread_time()  # CPU time of this thread: the cost on one core, not the
            ev = stream.push(c.audio[i : i + FRAME])  # wall time of a shared machine
            dt = time.thread_time() - t0
            if len(stream.evaluations) > n_eval:
                costs.append(dt)
            if ev is not None:
                when = ev.time_s
                break
        decisions.append(when)
    return decisions, costs


def vad_pauses(clip: Clip, vad: SileroVAD, eot=None) -> list[tuple[float, float, float | None, float]]:
    """Stream the clip through the VAD (end after V1_EVAL_SILENCE_S) -> per pause
    (speech_end_s, event_time_s, next_start_s or None, v1-mini probability or nan)."""
    stream = vad.stream(VADConfig(min_silence_s=V1_EVAL_SILENCE_S))
    pauses: list[list] = []
    for i in range(0, len(clip.audio), FRAME):
        for ev in stream.push(clip.audio[i : i + FRAME]):
            now = (i + FRAME) / ENGINE_RATE
            if ev.kind == "end":
                p = float("nan")
                if eot is not None:
                    end = min(len(clip.audio), i + FRAME)
                    p = float(eot.predict(float_to_int16(clip.audio[max(0, end - V1_WINDOW) : end])))
                pauses.append([ev.time_s, now, None, p])
            elif pauses and pauses[-1][2] is None:
                pauses[-1][2] = ev.time_s
    return [tuple(p) for p in pauses]


def _first_decision(pauses, rule) -> float | None:
    for speech_end, event_t, next_start, p in pauses:
        t = rule(speech_end, event_t, p)
        if next_start is None or t < next_start:
            return max(t, event_t)
    return None


def run(directory: str | Path, out: str | Path | None = None, with_v1: bool = True, stt: bool = False,
        stt_cache: str | Path | None = None) -> dict:
    clips = load_dataset(directory)
    det = EndOfTurnDetector.load()
    rows, costs_all = [], []
    timelines = None
    if stt:
        from benchmarks.turn_stt import stt_timelines

        timelines = stt_timelines(clips, stt_cache)
        audio_only = EndOfTurnDetector(det.vad, det.classifier, det.policy)
        decisions, _ = run_ours(clips, audio_only)
        rows.append({"method": "ours-audio", "config": "shipped policy, no transcript",
                     **score(decisions, clips, by_family=True)})
    for shift in SWEEP_SHIFTS:
        policy = sweep_policy(det.policy, shift) if shift else det.policy
        decisions, costs = run_ours(clips, det.with_policy(policy), timelines)
        costs_all += costs
        if not shift:
            config = "shipped policy" + (", real STT in the loop" if stt else ", no transcript")
            rows.insert(0, {"method": "ours", "config": config, **score(decisions, clips, by_family=True)})
        rows.append({"method": "ours-sweep", "config": f"bars {shift:+.1f} logit", **score(decisions, clips)})
    eot = None
    if with_v1:
        from livekit.local_inference import EOT

        eot = EOT()
    pauses = [vad_pauses(c, det.vad, eot) for c in clips]
    for thr in VAD_THRESHOLDS_S:
        dec = [_first_decision(p, lambda se, et, pr, thr=thr: se + thr) for p in pauses]
        rows.append({"method": "vad", "config": f"silence={thr:.1f}s", **score(dec, clips, by_family=True)})
    if with_v1:
        for md in V1_MAX_DELAYS_S:
            for thr in V1_THRESHOLDS:
                rule = lambda se, et, pr, thr=thr, md=md: et if pr >= thr else se + md  # noqa: E731
                dec = [_first_decision(p, rule) for p in pauses]
                rows.append({"method": "v1-mini", "config": f"thr={thr},max_delay={md}s",
                             **score(dec, clips, by_family=True)})
    report = {"clips": len(clips), "policy": asdict(det.policy), "stt_in_loop": stt, "rows": rows,
              "summary": summarize(rows), "family_summary": family_summary(rows),
              "ours_decision_cost_ms": {"median": 1e3 * float(np.median(costs_all)),
                                        "p99": 1e3 * float(np.percentile(costs_all, 99)),
                                        "max": 1e3 * float(np.max(costs_all)), "n": len(costs_all)}}
    if out:
        Path(out).write_text(json.dumps(report, indent=2))
    return report


def summarize(rows: list[dict]) -> dict:
    """Per method: the lowest mean latency among configs at <= 5% and <= 10% false cutoffs."""
    summary: dict = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        for cap in (0.05, 0.10):
            ok = [r for r in rows if r["method"] == method and r["false_cutoff_rate"] <= cap
                  and "latency_mean_s" in r]
            best = min(ok, key=lambda r: r["latency_mean_s"]) if ok else None
            summary.setdefault(method, {})[f"fc<={int(cap * 100)}%"] = (
                {"config": best["config"], "latency_mean_s": best["latency_mean_s"],
                 "false_cutoff_rate": best["false_cutoff_rate"]} if best else None)
    return summary


def family_summary(rows: list[dict], cap: float = 0.05) -> dict:
    """Per family and method: the lowest mean latency among configs at <= cap false cutoffs
    on that family (the baselines' sweep points are read per family, eot-bench style; "ours"
    is its one shipped policy)."""
    out: dict = {}
    for r in rows:
        for fam, s in r.get("families", {}).items():
            if s["false_cutoff_rate"] > cap or "latency_mean_s" not in s:
                continue
            best = out.setdefault(fam, {}).get(r["method"])
            if best is None or s["latency_mean_s"] < best["latency_mean_s"]:
                out[fam][r["method"]] = {"config": r["config"], "latency_mean_s": s["latency_mean_s"],
                                         "false_cutoff_rate": s["false_cutoff_rate"],
                                         "false_cutoff_complete": s.get("false_cutoff_complete"),
                                         "false_cutoff_paused": s.get("false_cutoff_paused")}
    return out


def format_report(report: dict) -> str:
    lines = [f"{'method':10s} {'config':28s} {'FC%':>6s} {'mean':>6s} {'p50':>6s} {'p90':>6s}"]
    for r in report["rows"]:
        lines.append(f"{r['method']:10s} {r['config']:28s} {100 * r['false_cutoff_rate']:6.1f} "
                     f"{r.get('latency_mean_s', float('nan')):6.3f} {r.get('latency_p50_s', float('nan')):6.3f} "
                     f"{r.get('latency_p90_s', float('nan')):6.3f}")
    lines.append("summary (lowest mean latency at a false-cutoff cap):")
    for method, caps in report["summary"].items():
        for cap, best in caps.items():
            lines.append(f"  {method:10s} {cap}: " + (f"{best['latency_mean_s']:.3f} s ({best['config']}, "
                         f"FC {100 * best['false_cutoff_rate']:.1f}%)" if best else "none"))
    ours = report["rows"][0]
    for fam, s in ours.get("families", {}).items():
        lines.append(f"  ours on {fam:10s}: FC {100 * s['false_cutoff_rate']:5.1f}% (complete "
                     f"{100 * s.get('false_cutoff_complete', 0):.1f}%, paused {100 * s.get('false_cutoff_paused', 0):.1f}%), "
                     f"mean {s.get('latency_mean_s', float('nan')):.3f} s")
    for fam, methods in report.get("family_summary", {}).items():
        lines.append(f"  {fam} at <= 5% FC: " + ", ".join(f"{m} {b['latency_mean_s']:.3f} s" for m, b in methods.items()))
    c = report["ours_decision_cost_ms"]
    lines.append(f"ours: CPU time of a push that ran the classifier (one thread): median {c['median']:.2f} ms, "
                 f"p99 {c['p99']:.2f} ms, max {c['max']:.2f} ms (n={c['n']})")
    return "\n".join(lines)
