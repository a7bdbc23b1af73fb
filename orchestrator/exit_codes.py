"""The exit statuses of ``python -m orchestrator`` (as the original runtime's), by meaning.

Every command exits with one of these, and prints the same number as ``exitCode`` in its
``--json`` output when it fails.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What an exit status means."""

    OK = 0
    INTERNAL = 1
    """An internal error, or a request that failed for a reason of its own."""
    USAGE = 2
    """A bad command line: unknown option, missing argument, a file it names is missing."""
    CONFIG = 3
    """The configuration cannot be read: no goondan.yaml, unreadable YAML, a state directory
    that cannot be written."""
    VALIDATION = 4
    """The configuration was read and is invalid."""
    NETWORK = 5
    """A peer did not answer: no daemon running, a daemon gone silent, a cluster or a model
    provider out of reach."""
    AUTH = 6
    """A credential is missing or refused: a Model's API key, a bearer token."""
    INTERRUPTED = 130
    """Stopped by Ctrl-C."""


def error_name(code: int) -> str:
    """``CONFIG_ERROR`` style name of an exit status (``INTERNAL_ERROR`` for unknown ones)."""
    try:
        member = ExitCode(code)
    except ValueError:
        return "INTERNAL_ERROR"
    return {
        ExitCode.OK: "OK",
        ExitCode.USAGE: "INVALID_ARGUMENT",
        ExitCode.INTERRUPTED: "INTERRUPTED",
    }.get(member, f"{member.name}_ERROR")
