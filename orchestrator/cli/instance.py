"""Bare ``instance``: the terminal view of :mod:`orchestrator.cli.instance_view`, where it can run.

It runs when standard input and output are a terminal, ``--json`` is not given, and Textual
(the ``tui`` extra) is installed; otherwise the command prints the list ``instances`` prints,
after a line on stderr saying why (none with ``--json``, whose output is read by programs).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path


def why_no_view(args: argparse.Namespace) -> str | None:
    """Why the view cannot run here, or ``None`` when it can."""
    if getattr(args, "json", False):
        return "--json"
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        return "not a terminal"
    if importlib.util.find_spec("textual") is None:
        return "Textual is not installed (pip install 'goondan-py[tui]')"
    return None


def view(args: argparse.Namespace, state_dir: Callable[[], Path]) -> int | None:
    """Run the view and return its exit status; ``None`` when it cannot run here (the caller
    lists the instances instead)."""
    reason = why_no_view(args)
    if reason is not None:
        if not getattr(args, "json", False):
            print(f"instance: {reason}: listing the instances instead", file=sys.stderr)
        return None
    from orchestrator.cli.api_target import TargetError, daemon_api
    from orchestrator.cli.instance_view import InstanceView

    try:
        api = daemon_api(args, state_dir)
    except TargetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return InstanceView(api).run() or 0
