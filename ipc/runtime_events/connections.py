"""The events of a Connection and of its connector's process."""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from ipc.runtime_events.base import RuntimeEvent
from ipc.runtime_events.types import EventType

# -- connections ------------------------------------------------------------------------------


class ConnectionEvent(RuntimeEvent):
    """A Connection's events and its process's health."""

    connection: str | UnsetType = UNSET
    event: str | UnsetType = UNSET
    rule: int | UnsetType | None = UNSET
    """The index of the ingress rule that matched (``null``: the Connection's default)."""
    error: str | UnsetType = UNSET
    consecutive_failures: int | UnsetType = UNSET


class ConnectorEventEvent(ConnectionEvent, tag=EventType.CONNECTOR_EVENT.value):
    """A connector's event was routed to an agent."""


class ConnectionRecoveredEvent(ConnectionEvent, tag=EventType.CONNECTION_RECOVERED.value):
    """A failing connection works again."""


class ConnectionFailedEvent(ConnectionEvent, tag=EventType.CONNECTION_FAILED.value):
    """A connection reported a failure."""


class ConnectionFinishedEvent(ConnectionEvent, tag=EventType.CONNECTION_FINISHED.value):
    """A connection's source is exhausted."""
