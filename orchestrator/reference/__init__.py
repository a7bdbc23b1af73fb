"""The documentation's reference pages, written from the code they describe.

Each page is made from its one source: the resource kinds and fields from the exported JSON
Schema (:mod:`bundle.schema`), the commands and flags from the argument parser
(:mod:`orchestrator.cli.parser`), the runtime event types from their declarations
(:mod:`ipc.runtime_events`), the HTTP API from its OpenAPI document
(:mod:`orchestrator.http.openapi`), the metrics from their declarations
(:mod:`orchestrator.http.metrics`). The site's build (``docs/hooks.py``) writes them on every build,
so a reference page cannot fall behind its source; ``python -m orchestrator.reference PAGE``
prints one.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.reference.cli import cli_page
from orchestrator.reference.events import events_page
from orchestrator.reference.http_api import http_api_page
from orchestrator.reference.metrics import metrics_page
from orchestrator.reference.resources import resources_page

PAGES: dict[str, Callable[[], str]] = {
    "reference/resources.md": resources_page,
    "reference/cli.md": cli_page,
    "reference/events.md": events_page,
    "reference/http-api.md": http_api_page,
    "reference/metrics.md": metrics_page,
}
"""Each generated page, by its path in the site, with what writes it."""

__all__ = ["PAGES", "cli_page", "events_page", "http_api_page", "metrics_page", "resources_page"]
