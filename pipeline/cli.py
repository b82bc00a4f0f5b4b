"""The `parley` command line. Each subcommand lives in its own module under
pipeline/commands/ and exposes `register(subparsers)`; the module list below is the CLI."""

from __future__ import annotations

import argparse
import importlib
import sys

from parley.errors import ParleyError
from pipeline.allocator import reexec_under_jemalloc

COMMAND_MODULES = (
    "pipeline.commands.models",
    "pipeline.commands.bench",
    "pipeline.commands.say",
    "pipeline.commands.transcribe",
    "pipeline.commands.livekit",
    "pipeline.commands.serve",
    "pipeline.commands.talk",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley", description="Parley: a real-time voice agent on local models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the process's own command line: run it on jemalloc (pipeline/allocator.py)
        try:
            reexec_under_jemalloc()
        except ParleyError as e:
            print(f"parley: error: {e}", file=sys.stderr)
            return 2
    parser = build_parser()
    # A command that hands its arguments to a module's own parser (the benchmarks, see
    # commands/bench.py) takes what this parser does not know; any other command refuses it.
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "forwards", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ParleyError, ValueError, FileNotFoundError) as e:  # bad input: one line, not a traceback
        print(f"parley {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
