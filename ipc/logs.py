"""Structured logging set up once per process (both ends of the wire use it).

One event per line: JSON when stderr is not a terminal (daemons, CI, log shippers), a
readable console format on a terminal. The level comes from the argument, else
``GOONDAN_LOG_LEVEL``, else ``info``. Context (agent, instance key, trace id) is bound with
``structlog.contextvars`` and appears on every line logged inside it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog


def configure_logging(
    level: str | None = None, *, process: str | None = None, json: bool | None = None
) -> None:
    """Configure structlog for this process; ``process`` is added to every event."""
    name = (level or os.environ.get("GOONDAN_LOG_LEVEL") or "info").upper()
    numeric = logging.getLevelName(name)
    if not isinstance(numeric, int):
        numeric = logging.INFO
    as_json = (not sys.stderr.isatty()) if json is None else json
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if process is not None:
        processors.insert(0, _add_process(process))
    processors.append(
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),  # one write per line
        cache_logger_on_first_use=False,
    )


def _add_process(name: str) -> Any:
    def add(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("process", name)
        return event

    return add
