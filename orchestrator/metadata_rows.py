"""An instance's ``metadata.json`` as the CLI and the studio read it back (the rows of
:func:`goondan.state_files.metadata.list_instances`).

Every field takes whatever the file holds: a hand-edited record is shown as it is, or passed
over by the reader that needs a field of its type, never a reason to fail a listing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec


class MetadataRow(msgspec.Struct, rename="camel"):
    """One instance's record, read for display."""

    agent_name: object = None
    """The agent the instance belongs to."""
    instance_key: object = None
    """The instance's key (``None`` for a record of a newer format, named instead)."""
    status: object = None
    """The instance's status."""
    created_at: object = None
    """When the instance was created."""
    updated_at: object = None
    """When its record last changed."""
    usage: object = None
    """What its model calls used (``{inputTokens, outputTokens, totalTokens, cost, calls}``)."""
    directory: str = ""
    """The instance's directory (added by the listing)."""


def metadata_row(data: Mapping[str, Any]) -> MetadataRow:
    """``data`` (a ``metadata.json`` object) as a :class:`MetadataRow`."""
    return msgspec.convert(data, MetadataRow)
