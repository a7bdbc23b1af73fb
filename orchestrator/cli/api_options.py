"""The options that say which daemon a command talks to: ``--api-url`` and ``--api-token-env``.

Only ``argparse`` here: the parser adds them to every command that asks the daemon, and
building it (for ``--help`` or a shell's completion) must not import the HTTP client that
:mod:`orchestrator.cli.api_target` uses to ask.
"""

from __future__ import annotations

import argparse
from typing import Any

API_URL_ENV = "GOONDAN_API_URL"
"""The daemon's URL when ``--api-url`` is not given."""


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--api-url`` and ``--api-token-env``, on every command that talks to the daemon."""
    group = parser.add_argument_group("a daemon over TCP")
    group.add_argument(
        "--api-url",
        metavar="URL",
        action=_JoinedUrls,
        help="talk to the daemon listening at http://HOST:PORT (run --listen) instead of the "
        f"state directory's api.sock (default: ${API_URL_ENV}); a cluster's leaders: repeat "
        "it or separate them with commas, asked in order until one answers",
    )
    group.add_argument(
        "--api-token-env",
        metavar="NAME",
        help="environment variable holding the bearer token that daemon wants (with --api-url; "
        "api.sock needs none)",
    )


class _JoinedUrls(argparse.Action):
    """``--api-url`` given again adds to the list (kept as one comma-separated string)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before},{values}" if before else values)
