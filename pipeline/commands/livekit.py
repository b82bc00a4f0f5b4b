"""`parley livekit dev|start|token`: run the voice agent as a LiveKit worker, or print a
join token for a client. LiveKit's own CLI exits 0 when its credentials are missing; this one
names what is missing and exits 2 before connecting."""

from __future__ import annotations

import asyncio
import sys


def register(sub) -> None:
    from pipeline.config import SessionConfig

    p = sub.add_parser("livekit", help="run the agent in LiveKit rooms (dev|start), or print a join token")
    lk = p.add_subparsers(dest="livekit_command", metavar="{dev,start,token}")
    for name, help_ in (("dev", "a development worker (verbose logs)"), ("start", "a production worker")):
        w = lk.add_parser(name, help=help_)
        SessionConfig.add_arguments(w)
        w.set_defaults(func=_run_worker, dev=name == "dev")
    t = lk.add_parser("token", help="print a join token (LIVEKIT_API_KEY / LIVEKIT_API_SECRET)")
    t.add_argument("--room", required=True)
    t.add_argument("--identity", required=True)
    t.set_defaults(func=_token)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run_worker(args) -> int:
    import logging

    from pipeline.config import SessionConfig
    from pipeline.worker import build_worker, missing_livekit_env

    missing = missing_livekit_env()
    if missing:
        print(f"parley livekit {'dev' if args.dev else 'start'}: error: {', '.join(missing)} not set "
              "(export LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=...)",
              file=sys.stderr)
        return 2
    config = SessionConfig.from_args(args)
    logging.basicConfig(level=logging.DEBUG if args.dev else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = build_worker(config, freeze_loaded=True)
    try:
        asyncio.run(server.run(devmode=args.dev))
    except RuntimeError as e:  # livekit's own words, e.g. "failed to connect to livekit after 16 attempts"
        print(f"parley livekit: error: {e} (is a LiveKit server running at the LIVEKIT_URL?)", file=sys.stderr)
        return 1
    return 0


def _token(args) -> int:
    from pipeline.worker import join_token

    print(f"room: {args.room}  identity: {args.identity}")
    print(join_token(args.room, args.identity))
    return 0
