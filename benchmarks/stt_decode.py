"""Cost of the end-of-utterance decode, side by side: encoder window, beam and threads.

The final is ready at flush only if the decode started at ~100 ms of silence ends inside the
endpointing wait, so this times exactly that decode (the gated buffer: 0.19 s of pad, the
turn, 0.1 s of silence) on the held-out clips of benchmarks.stt, each configuration on the
same clips in one run (a shared machine: compare ratios, not absolute times), with its WER.

    python -m benchmarks.stt_decode [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

# (label, min_window_s, final beam, cpu_threads); the first is the default
CONFIGS = (("window 10 s, beam 5, 1 thread", 10.0, 5, 1),
           ("window 10 s, greedy, 1 thread", 10.0, 1, 1),
           ("window 6 s, beam 5, 1 thread", 6.0, 5, 1),
           ("window 10 s, beam 5, 2 threads", 10.0, 5, 2))


def run(reps: int) -> dict:
    from benchmarks.stt import clips, wer
    from benchmarks.timing import median_seconds
    from stt import TranscriberConfig, WhisperDecoder
    from tests.speech import with_silence

    data = [(text, with_silence(audio, 0.192, 0.096)) for text, audio, _ in clips("held-out")]
    out = []
    for label, window, beam, threads in CONFIGS:
        dec = WhisperDecoder(TranscriberConfig(min_window_s=window, cpu_threads=threads, decode_workers=1))
        times, hyps = [], []
        for _, audio in data:
            result: list = []

            def decode(a=audio, d=dec, b=beam, r=result) -> None:
                r.append(d.decode(a, "", b)[0])

            times.append(median_seconds(decode, reps))
            hyps.append(" ".join(w.text for w in result[-1]))
        row = {"config": label, "min_window_s": window, "beam": beam, "threads": threads,
               "decode_ms_median": 1000 * statistics.median(times),
               "decode_ms_p90": 1000 * float(np.percentile(times, 90)),
               "wer": wer([t for t, _ in data], hyps)}
        print(f"{label:32s} median {row['decode_ms_median']:6.1f} ms  p90 {row['decode_ms_p90']:6.1f} ms  "
              f"WER {row['wer']:5.2f}%", flush=True)
        out.append(row)
    return {"clips": len(data), "reps": reps, "configs": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="timed decodes per clip and configuration (median)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    result = run(args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
