"""Runtime events as the daemon logs them, made by hand for the studio's unit tests."""

from __future__ import annotations

from typing import Any

TRACE = "5f54e149aeb22c42a25b7c35f33acfde"
"""The trace every event made here belongs to."""


def event(
    kind: str, stamp: str, agent: str, span: str, parent: str | None = None, **fields: Any
) -> dict[str, Any]:
    """A ``kind`` event of ``agent`` at second ``stamp`` of a fixed minute, on ``span`` (under
    ``parent``), with ``fields``."""
    out: dict[str, Any] = {
        "type": kind,
        "timestamp": f"2026-11-23T17:57:{stamp}Z",
        "agentName": agent,
        "instanceKey": "default",
        "traceId": TRACE,
        "spanId": span,
    }
    if parent:
        out["parentSpanId"] = parent
    return {**out, **fields}
