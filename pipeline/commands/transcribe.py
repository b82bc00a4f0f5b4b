"""`parley transcribe FILE.wav [--stream [--fast]] [--model KEY]`: print a file's transcript."""

from __future__ import annotations

from parley.wav import read_wav


def run(args) -> int:
    from stt import StreamingTranscriber, TranscriberConfig, replay, transcribe

    audio, sr = read_wav(args.file)
    if not args.stream:
        print(transcribe(audio, sr, model=args.model).text)
        return 0

    def show(e) -> None:
        text = e.text if e.kind == "final" else f"{e.stable_text} | {e.text[len(e.stable_text):].strip()}"
        print(f"{e.kind:9s} audio {e.audio_time_s:6.2f} s  delay {e.latency_s * 1000:6.0f} ms  {text}", flush=True)

    with StreamingTranscriber(TranscriberConfig(model=args.model)) as st:
        replay(st, audio, sr, realtime=not args.fast, on_event=show)
    return 0


def register(sub) -> None:
    p = sub.add_parser("transcribe", help="transcribe a WAV file (streaming replay with --stream)")
    p.add_argument("file", help="WAV file (any rate, mono or stereo)")
    p.add_argument("--model", default="whisper-tiny.en", choices=["whisper-tiny.en", "whisper-base"])
    p.add_argument("--stream", action="store_true", help="replay in real time, printing each event")
    p.add_argument("--fast", action="store_true", help="with --stream: replay without sleeping")
    p.set_defaults(func=run)
