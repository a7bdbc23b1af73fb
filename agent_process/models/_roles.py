"""What the message-list converters of the provider adapters share."""

from __future__ import annotations

from typing import Any

from tools_base import JsonObject


def add_merged(out: list[JsonObject], role: str, key: str, items: list[Any]) -> None:
    """Add ``items`` to the ``key`` list of the last entry of ``out`` when that entry has
    ``role``, else as a new entry: these APIs want consecutive messages of one role as one."""
    if out and out[-1]["role"] == role:
        existing = out[-1][key]
        assert isinstance(existing, list)
        existing.extend(items)
    else:
        out.append({"role": role, key: list(items)})
