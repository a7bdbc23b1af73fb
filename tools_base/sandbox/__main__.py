"""``python -m tools_base.sandbox probe [--mode MODE] [--json]``: which sandbox tool programs
get on this machine.

The Orchestrator asks this way (``run`` and ``doctor``) because it does not import
``tools_base`` (DESIGN.md arrows), and because the answer must be this machine's as a child
process finds it, not the daemon's own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tools_base.sandbox import SandboxMode, probe
from tools_base.sandbox._quota import quota_kind


def main(argv: list[str] | None = None) -> int:
    """Print the probe; exit 0 when tool programs can run, 1 when none can."""
    parser = argparse.ArgumentParser(prog="python -m tools_base.sandbox")
    commands = parser.add_subparsers(dest="command", required=True)
    asked = commands.add_parser("probe", help="which sandbox tool programs get here")
    asked.add_argument("--mode", choices=[str(m) for m in SandboxMode], default="auto")
    asked.add_argument("--json", action="store_true", help="one JSON object")
    asked.add_argument("--path", default=".", help="where workspaces live (for the disk quota)")
    args = parser.parse_args(argv)
    found = probe(SandboxMode(args.mode))
    disk = quota_kind(os.path.abspath(args.path))
    if args.json:
        print(json.dumps({**found.to_json(), "disk": disk}))
    else:
        print(
            f"{found.backend or 'none'}: {found.reason} (processes: {found.processes}; "
            f"disk quota: {disk})"
        )
    return 0 if found.available else 1


if __name__ == "__main__":
    sys.exit(main())
