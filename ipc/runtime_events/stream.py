"""The event log's heading line and the events of the live event stream only."""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from ipc.runtime_events.base import RuntimeEvent
from ipc.runtime_events.types import EventType

# -- the log and the live stream --------------------------------------------------------------


class EventLogOpenedEvent(RuntimeEvent, tag=EventType.EVENTLOG_OPENED.value):
    """The first line of every event log file: the format it is written in."""

    format_version: int | UnsetType = UNSET


class TextDeltaEvent(RuntimeEvent, tag=EventType.TEXT_DELTA.value):
    """A piece of a streamed Turn's model text (live event stream only)."""

    turn_id: str | UnsetType = UNSET
    step_id: str | UnsetType = UNSET
    text: str | UnsetType = UNSET


class StreamEndEvent(RuntimeEvent, tag=EventType.STREAM_END.value):
    """The live event stream ends."""
