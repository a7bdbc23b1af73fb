"""``python -m orchestrator.reference PAGE``: print a generated reference page (its path in the
site, e.g. ``reference/cli.md``); with no argument, list them."""

from __future__ import annotations

import sys

from orchestrator.reference import PAGES


def main(argv: list[str]) -> int:
    """Print the page ``argv[0]`` names, or the pages' names; 2 for an unknown page."""
    if not argv:
        print("\n".join(PAGES))
        return 0
    write = PAGES.get(argv[0])
    if write is None:
        print(f"no page {argv[0]!r}; pages: {', '.join(PAGES)}", file=sys.stderr)
        return 2
    sys.stdout.write(write())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
