"""What asking the daemon may fail with (raised by :mod:`orchestrator.http.client`, which
re-exports them, and by :mod:`orchestrator.http.reattach`)."""

from __future__ import annotations

from goondan.errors import DaemonError


class NoDaemon(DaemonError, RuntimeError):
    """No daemon answers on this state directory."""


class NoAnswer(DaemonError, RuntimeError):
    """The daemon took the request but went away (or fell silent) before answering."""
