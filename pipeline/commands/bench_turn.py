"""`parley bench turn --data DIR [--stt] [--stt-cache FILE] [--out report.json]`: end-of-turn
benchmark (benchmarks/turn.py), per synthesizer family when the clips name one."""

from __future__ import annotations


def register_bench(sub) -> None:
    p = sub.add_parser("turn", help="end-of-turn detection: false cutoffs and latency vs VAD and v1-mini")
    p.add_argument("--data", required=True, help="dataset directory (NAME.wav + NAME.json)")
    p.add_argument("--out", help="write the JSON report here")
    p.add_argument("--no-v1", action="store_true", help="skip LiveKit's v1-mini baseline")
    p.add_argument("--stt", action="store_true",
                   help="run the real streaming STT and hand its interim texts to the detector at their real times")
    p.add_argument("--stt-cache", help="JSON file keeping the STT's timelines between runs (with --stt)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from benchmarks.turn import format_report, run

    print(format_report(run(args.data, args.out, with_v1=not args.no_v1, stt=args.stt, stt_cache=args.stt_cache)))
    return 0
