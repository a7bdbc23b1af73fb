"""``studio``: the local web app over the running daemon or a state directory."""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli.common import serve, state_dir_of


def cmd_studio(args: argparse.Namespace) -> int:
    """Serve the studio (a local web app) over the running daemon or a state directory."""
    from goondan.loopback import is_loopback

    state_dir = state_dir_of(args)
    if not state_dir.is_dir():
        print(
            f"error: no state directory at {state_dir} (run the swarm first, or pass --state-dir)",
            file=sys.stderr,
        )
        return 1
    if not 0 <= args.port < 65536:
        print(f"error: --port {args.port}: not a port", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(
            f"warning: serving the studio on {args.host}: it has no login, and shows every "
            "conversation and tool call to whoever reaches that address",
            file=sys.stderr,
        )
    if args.open is None:
        args.open = sys.stdout.isatty()
    return serve(args, "studio", _studio)


async def _studio(args: argparse.Namespace) -> int:
    from orchestrator.studio.server import serve_studio

    def announce(url: str) -> None:
        # One write for the whole line: print() writes the text and its newline apart, and
        # unbuffered (PYTHONUNBUFFERED) a log line on stderr could land between them, glued
        # to the link a reader (or a script) takes from this line.
        sys.stdout.write(f"studio: {url}\n")
        sys.stdout.flush()

    try:
        return await serve_studio(
            state_dir_of(args),
            host=args.host,
            port=args.port,
            open_browser=args.open,
            announce=announce,
        )
    except OSError as exc:  # the port is taken, the address is not this machine's
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
