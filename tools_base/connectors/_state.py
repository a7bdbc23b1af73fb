"""The state files connectors keep in their Connection's directory (``deliveries.json``,
``schedule-state.json``): one way to read a versioned JSON record, so each refuses a newer
format and an unreadable file alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goondan.errors import newer_format
from tools_base._connector import ConnectorError


def read_state(path: Path, record: str, supported: int) -> dict[str, Any] | None:
    """The JSON object ``path`` holds: ``None`` when there is no file, ``{}`` when what is there
    is not a JSON object (its reader then says it is not its record); ConnectorError when the
    file cannot be read or was written by a newer version (``formatVersion`` past
    ``supported``)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConnectorError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return {}
    refusal = newer_format(path, record, data.get("formatVersion"), supported)
    if refusal is not None:
        raise ConnectorError(refusal)
    return data
