"""`parley say "text" -o out.wav [--rate HZ] [--backend piper|espeak] [--stream]`."""

from __future__ import annotations

import sys
import threading

import numpy as np

from parley.audio import int16_to_float
from parley.wav import write_wav


def run(args) -> int:
    from tts import StreamConfig, create_synthesizer
    from tts.text_feed import feed_text

    synth = create_synthesizer(args.backend, threads=args.threads)
    synth.warmup()
    stream = synth.stream(StreamConfig(sample_rate=args.rate))
    feeder = threading.Thread(target=feed_text, args=(stream, args.text, args.tps if args.stream else 0))
    feeder.start()
    frames = list(stream)
    feeder.join()
    pcm = np.concatenate([f.pcm for f in frames]) if frames else np.zeros(0, dtype=np.int16)
    write_wav(args.output, int16_to_float(pcm), args.rate)
    if args.stream:
        m = stream.metrics
        print(f"{'chunk':>5}  {'ready_ms':>8}  {'synth_ms':>8}  {'audio_ms':>8}  {'first_frame_ms':>14}  text")
        for c in m.chunks:
            ff = f"{c.first_frame_s * 1000:.0f}" if c.first_frame_s is not None else "-"
            print(f"{c.index:>5}  {c.ready_s * 1000:8.0f}  {c.synth_s * 1000:8.0f}  {c.audio_s * 1000:8.0f}  "
                  f"{ff:>14}  {c.text}")
        if m.first_frame_s is not None:
            print(f"first audio frame {m.first_frame_s * 1000:.0f} ms after the first text delta "
                  f"({args.tps:g} tokens/s); RTF {synth.stats.rtf:.3f}")
    print(f"wrote {args.output}: {len(pcm) / args.rate:.2f} s at {args.rate} Hz ({synth.name})", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("say", help="speak a text into a WAV file")
    p.add_argument("text", help="what to say")
    p.add_argument("-o", "--output", default="say.wav", help="WAV file to write (16-bit mono)")
    p.add_argument("--rate", type=int, default=24_000, choices=(16_000, 24_000, 48_000), help="output rate")
    p.add_argument("--backend", default="piper", choices=("piper", "espeak"))
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads (Piper)")
    p.add_argument("--stream", action="store_true",
                   help="feed the text as LLM-like deltas and print each chunk's timings")
    p.add_argument("--tps", type=float, default=30.0, help="tokens per second with --stream")
    p.set_defaults(func=run)
