"""`parley talk [--host 127.0.0.1] [--port 8765] [--token T] [--max-sessions N] [--open]`:
talk to the agent in a browser page, with no LiveKit server (pipeline/talk/)."""

from __future__ import annotations

import asyncio
import sys
import webbrowser

from pipeline.allocator import freeze_loaded_objects
from pipeline.talk import TalkConfig, TalkServer, serve


def run(args) -> int:
    # Checked before any model loads: a public host without a token never starts.
    config = TalkConfig(host=args.host, port=args.port, token=args.token, max_sessions=args.max_sessions)
    # The voice session is imported here, not at module level: `parley -h` stays light.
    from pipeline.session import SessionConfig, load_components, session_factory

    session_config = SessionConfig.from_args(args)
    # the models load before the page opens, not while the first visitor's audio queues up
    print("parley talk: loading the models ...", file=sys.stderr, flush=True)
    components = load_components(session_config)
    freeze_loaded_objects()  # this process is ours: see pipeline/allocator.py
    # 60 ms ahead of real time: the page's jitter buffer plays from it
    factory = session_factory(session_config, components, lead_s=0.06)

    def ready(server: TalkServer) -> None:
        url = server.url()
        print(f"parley talk: open {url} and press 'Start talking' (Ctrl-C stops)", file=sys.stderr, flush=True)
        if args.open:
            webbrowser.open(url)

    try:
        asyncio.run(serve(config, factory, on_ready=ready))
    finally:  # the engine thread ends and nothing is left half-served
        components.close()
    return 0


def register(sub) -> None:
    p = sub.add_parser("talk", help="talk to the agent in a local browser page (no LiveKit server)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind; anything but loopback requires --token")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", default=None,
                   help="secret the page must present (8+ characters; required off loopback)")
    p.add_argument("--max-sessions", type=int, default=4, help="concurrent sessions (one per page)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    from pipeline.config import SessionConfig

    SessionConfig.add_arguments(p)
    p.set_defaults(func=run)
