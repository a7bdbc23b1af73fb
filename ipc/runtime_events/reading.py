"""Events read back: the union of every typed event, the :class:`RawEvent` an unknown one is
kept as, and encoding and decoding one JSON line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ipc.runtime_events import approvals, connections, limits, processes, stream, work
from ipc.runtime_events.base import RuntimeEvent
from ipc.runtime_events.types import EventType

TypedEvent = (
    work.TurnStartedEvent
    | work.TurnCompletedEvent
    | work.TurnFailedEvent
    | work.TurnCancellingEvent
    | work.TurnResumedEvent
    | work.StepStartedEvent
    | work.StepCompletedEvent
    | work.StepFailedEvent
    | work.ToolCalledEvent
    | work.ToolCompletedEvent
    | work.ToolFailedEvent
    | work.NetworkConnectionEvent
    | approvals.ApprovalRequestedEvent
    | approvals.ApprovalResumedEvent
    | approvals.ApprovalDecidedEvent
    | approvals.ApprovalExpiredEvent
    | approvals.ApprovalCancelledEvent
    | approvals.ApprovalRefusedEvent
    | processes.ProcessSpawnedEvent
    | processes.ProcessAdoptedEvent
    | processes.ProcessReadyEvent
    | processes.ProcessExitedEvent
    | processes.ProcessBackoffEvent
    | processes.ProcessRestartingEvent
    | processes.ProcessRestartRequestedEvent
    | processes.ProcessConfigRejectedEvent
    | processes.ProcessConfigAppliedEvent
    | processes.ProcessResumePendingEvent
    | processes.ProcessBrokenFdsEvent
    | limits.BudgetExceededEvent
    | limits.DeliveryLostEvent
    | limits.InboxOverflowEvent
    | limits.RequestCancelledEvent
    | limits.ModelPermitWaitingEvent
    | limits.ModelPermitGrantedEvent
    | limits.ModelPermitTimeoutEvent
    | limits.ModelRateLimitedEvent
    | connections.ConnectorEventEvent
    | connections.ConnectionRecoveredEvent
    | connections.ConnectionFailedEvent
    | connections.ConnectionFinishedEvent
    | stream.EventLogOpenedEvent
    | stream.TextDeltaEvent
    | stream.StreamEndEvent
)
"""Every event this runtime types: a new type is an :class:`EventType` member, its struct in its
family's module, and a line here (a test finds a tagged struct missing from it)."""


def _stamp_types() -> dict[str, type[RuntimeEvent]]:
    """Give each tagged class its :class:`EventType` as ``type`` (msgspec keeps the tag a
    plain string); the classes by type."""
    classes: dict[str, type[RuntimeEvent]] = {}
    for cls in TypedEvent.__args__:
        cls.type = EventType(cls.__struct_config__.tag)
        classes[cls.type] = cls
    return classes


_CLASSES = _stamp_types()
"""Each type's class: converting to one class is ~70 times faster than to the union."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class RawEvent:
    """An event this runtime cannot type, kept as it was read so it is written back whole.

    It answers the questions every event answers (type, agent, trace, ...) from its object.
    """

    __slots__ = ("data", "type")

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        kind = data.get("type")
        self.type: str = kind if isinstance(kind, str) else ""

    @property
    def timestamp(self) -> str:
        """When it was recorded, ``""`` when it does not say."""
        return _text(self.data.get("timestamp")) or ""

    @property
    def agent_name(self) -> str:
        """The agent it is about, ``""`` when it does not say."""
        return _text(self.data.get("agentName")) or ""

    @property
    def trace(self) -> str | None:
        """Its trace id, if any."""
        return _text(self.data.get("traceId"))

    @property
    def instance(self) -> str | None:
        """Its conversation instance, if any."""
        return _text(self.data.get("instanceKey"))

    @property
    def span(self) -> str | None:
        """Its span, if any."""
        return _text(self.data.get("spanId"))

    @property
    def parent_span(self) -> str | None:
        """Its parent span, if any."""
        return _text(self.data.get("parentSpanId"))

    def field(self, name: str) -> Any:
        """The value of its JSON key ``name``, ``None`` when absent."""
        return self.data.get(name)

    def to_builtins(self) -> dict[str, Any]:
        """The event's JSON object, as read."""
        return self.data

    def __repr__(self) -> str:
        return f"RawEvent({self.data!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawEvent) and other.data == self.data

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dict it holds


AnyEvent = RuntimeEvent | RawEvent
"""An event as read: typed (one of :data:`TypedEvent`), or kept raw."""

_ENCODER = msgspec.json.Encoder(enc_hook=str)
_DECODER: msgspec.json.Decoder[TypedEvent] = msgspec.json.Decoder(TypedEvent)


def encode_event(event: AnyEvent) -> bytes:
    """The event's JSON line, without its newline (anything unencodable written as text)."""
    if isinstance(event, RawEvent):
        return _ENCODER.encode(event.data)
    return _ENCODER.encode(event)


def read_event(data: Mapping[str, Any]) -> AnyEvent:
    """The typed event of a JSON object (an agent's report, a line of an older log), or the
    object kept raw when it does not fit a known type."""
    kind = data.get("type")
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return RawEvent(dict(data))
    if type(kind) is not str:  # an EventType member: msgspec reads a tag from a plain str
        data = {**data, "type": str(kind)}
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return RawEvent(dict(data))


PROCESS_FAMILY = "process"
"""The family of the lifecycle events (``process.<kind>``)."""


def event_family(event_type: str) -> str:
    """The family an event type belongs to: ``process`` for ``process.exited``."""
    return event_type.partition(".")[0]


def lifecycle_kind(event_type: str) -> str:
    """The kind of a lifecycle event type: ``exited`` for ``process.exited``."""
    return event_type.removeprefix(PROCESS_FAMILY + ".")


def decode_line(line: bytes | str) -> AnyEvent | None:
    """The event of one JSON line; ``None`` when the line is not a JSON object."""
    try:
        return _DECODER.decode(line)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        return None
    data = msgspec.json.decode(line)
    return RawEvent(data) if isinstance(data, dict) else None
