"""``python -m orchestrator``: the command line (one function per subcommand)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bundle import BundleError, json_schema, load_bundle

Command = Callable[[argparse.Namespace], int]


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a goondan.yaml: exit 0 with a summary, or list every error and exit 1."""
    path = Path(args.file)
    try:
        bundle = load_bundle(path, check_handlers=not args.no_handlers)
    except BundleError as exc:
        if args.json:
            print(
                json.dumps({"valid": False, "errors": [e.to_json() for e in exc.errors]}, indent=2)
            )
        else:
            for issue in exc.errors:
                print(issue.format(), file=sys.stderr)
            count = len(exc.errors)
            print(f"{count} error{'s' if count != 1 else ''} in {path}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"valid": True, "errors": [], "summary": bundle.summary()}, indent=2))
    else:
        print(f"{path}: valid ({bundle.summary()})")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of goondan.yaml documents."""
    print(json.dumps(json_schema(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator", description="Run and manage Goondan agent swarms."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check a goondan.yaml and report every error")
    validate.add_argument("file", help="path of goondan.yaml")
    validate.add_argument("--json", action="store_true", help="print the result as JSON")
    validate.add_argument(
        "--no-handlers", action="store_true", help="do not import tool modules to check handlers"
    )
    validate.set_defaults(run=cmd_validate)

    schema = commands.add_parser("schema", help="print the JSON Schema of goondan.yaml resources")
    schema.set_defaults(run=cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command: Command = args.run
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug of ours: one line, the traceback only when asked
        if args.debug:
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return 1
