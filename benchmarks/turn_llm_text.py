"""The voice LLM as the turn detector's text witness, on every transcript of an STT cache:
its P per text (for `turn_detection.training.loso --text-scores`) and its cost per call.

    python -m benchmarks.turn_llm_text --stt-cache FILE --out SCORES.json [--weight-format int8] [--raw | --probe FILE] [--history]

Each distinct transcript is scored as the session scores it (pipeline.turn_text: the voice
engine, the session's default instructions as the conversation so far, one prefill-only request
with that prefix cached; the embedded model's probe on the final hidden state, pipeline.
turn_probe, or with --raw the LLM's own P of a sentence / message end). With --history the words
come after two earlier exchanges (HISTORY), as in a session's later turns: the family clips are
single turns, and a conversation moves the LLM's hidden state. The wall time of each call is
recorded: median / p90 / max ms."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

# --history: the conversation before the user's words (a session's third turn; in no training set)
HISTORY = (
    {"role": "user", "content": "What's on my calendar for Thursday afternoon?"},
    {"role": "assistant", "content": "You have a dentist appointment at three and a call with Sam at five."},
    {"role": "user", "content": "Turn the living room lights down to thirty percent."},
    {"role": "assistant", "content": "Done, the living room lights are at thirty percent."},
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stt-cache", required=True, help="benchmarks/turn_stt.py cache (JSON)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--weight-format", default=None, help="engine weights (default: the voice default)")
    ap.add_argument("--raw", action="store_true", help="the LLM's own P, not the probe's (another model's witness)")
    ap.add_argument("--history", action="store_true", help="score after two earlier exchanges (HISTORY)")
    ap.add_argument("--probe", help="a pipeline.turn_probe file (default: the shipped one)")
    args = ap.parse_args(argv)
    from benchmarks.voice_report import cpu_model
    from llm_engine import LLMEngine
    from pipeline.config import DEFAULT_INSTRUCTIONS
    from pipeline.turn_probe import TextProbe
    from pipeline.turn_text import EngineCompletenessScorer
    from turn_detection.completeness import CompletenessScorer

    cache = json.loads(Path(args.stt_cache).read_text())
    texts = sorted({text for timeline in cache.values() for _, text in timeline if text.strip()})
    over = {"weight_format": args.weight_format} if args.weight_format else {}
    engine = LLMEngine.for_voice(**over)
    system = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}, *(HISTORY if args.history else ())]
    probe = None if args.raw else TextProbe.load(*([args.probe] if args.probe else []))
    scorer = EngineCompletenessScorer(engine, CompletenessScorer.load(), context=lambda: system, timeout_s=30.0,
                                      probe=probe)
    scorer.probability("Hello there")  # warm: the system prompt's blocks go into the prefix cache
    scores, ms = {}, []
    for text in texts:
        t0 = time.perf_counter()
        scores[text] = scorer.probability(text)
        ms.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(ms, n=10)
    cost = {"calls": len(ms), "median_ms": round(statistics.median(ms), 1), "p90_ms": round(q[-1], 1),
            "max_ms": round(max(ms), 1), "fallbacks": scorer.fallbacks}
    out = {"command": "python -m benchmarks.turn_llm_text " + " ".join(sys.argv[1:] if argv is None else argv),
           "cpu": cpu_model(),
           "weight_format": engine.config.weight_format, "witness": "raw" if args.raw else "probe",
           "context": "system prompt + HISTORY" if args.history else "system prompt",
           "cost": cost, "scores": scores}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(cost))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
