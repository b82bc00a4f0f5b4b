"""Cost of the end-of-utterance decode, side by side: encoder window, beam, threads and
trailing silence.

The final is ready at flush only if the decode started when speech stopped ends inside the
endpointing wait, so this times exactly that decode (the gated buffer: 0.19 s of pad, the
turn, then 32 ms of silence when it starts at the first silent VAD window or 96 ms after
three), on the held-out clips of benchmarks.stt, with its WER. Configurations alternate clip
by clip in one run (a shared machine: compare ratios, not absolute times).

(Measured once and dropped: the stable words given to the decoder as a forced prefix cost
the same, x1.01, since CTranslate2 steps through a prefix token by token;
results/2026-12-04-cpu2zen4-stt-decode-levers.json.)

    python -m benchmarks.stt_decode [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

# (label, min_window_s, beam, cpu_threads, trailing silence s); the first is the reference
CONFIGS = (("window 10 s, beam 5, 1 thread, 96 ms", 10.0, 5, 1, 0.096),
           ("window 10 s, beam 5, 1 thread, 32 ms", 10.0, 5, 1, 0.032),
           ("window 10 s, beam 2, 1 thread, 32 ms", 10.0, 2, 1, 0.032),
           ("window 10 s, greedy, 1 thread, 32 ms", 10.0, 1, 1, 0.032),
           ("window 6 s, beam 5, 1 thread, 32 ms", 6.0, 5, 1, 0.032),
           ("window 10 s, beam 5, 2 threads, 32 ms", 10.0, 5, 2, 0.032))


def run(reps: int, configs=CONFIGS) -> dict:
    from benchmarks.stt import clips, wer
    from benchmarks.timing import median_seconds
    from stt import TranscriberConfig, WhisperDecoder
    from tests.speech import with_silence

    data = [(text, audio) for text, audio, _ in clips("held-out")]
    decoders = {}
    for _, window, _, threads, _ in configs:
        decoders.setdefault((window, threads), WhisperDecoder(TranscriberConfig(
            min_window_s=window, cpu_threads=threads, decode_workers=1)))
    times: list[list[float]] = [[] for _ in configs]
    hyps: list[list[str]] = [[] for _ in configs]
    for _, speech in data:
        for i, (_, window, beam, threads, silence) in enumerate(configs):  # clip by clip
            dec = decoders[(window, threads)]
            audio = with_silence(speech, 0.192, silence)
            result: list = []

            def decode(a=audio, d=dec, b=beam, r=result) -> None:
                r.append(d.decode(a, "", b)[0])

            times[i].append(median_seconds(decode, reps))
            hyps[i].append(" ".join(w.text for w in result[-1]))
    out = []
    refs = [t for t, _ in data]
    for i, (label, window, beam, threads, silence) in enumerate(configs):
        ratio = [a / b for a, b in zip(times[i], times[0])]
        row = {"config": label, "min_window_s": window, "beam": beam, "threads": threads, "silence_s": silence,
               "decode_ms_median": 1000 * statistics.median(times[i]),
               "decode_ms_p90": 1000 * float(np.percentile(times[i], 90)),
               "time_vs_first_median": statistics.median(ratio), "wer": wer(refs, hyps[i])}
        print(f"{label:40s} median {row['decode_ms_median']:6.1f} ms  p90 {row['decode_ms_p90']:6.1f} ms  "
              f"x{row['time_vs_first_median']:.2f}  WER {row['wer']:5.2f}%", flush=True)
        out.append(row)
    return {"clips": len(data), "reps": reps, "configs": out}


def main(argv: list[str] | None = None) -> int:
    import os

    from benchmarks.voice_report import cpu_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="timed decodes per clip and configuration (median)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    result = run(args.reps)
    if args.json:
        result["machine"] = {"cpu": cpu_model(), "cores": os.cpu_count() or 0, "load_avg_after": os.getloadavg()}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
