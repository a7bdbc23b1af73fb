"""Runtime events, typed: one :class:`EventType` names every event; each family (turn, step,
tool, approval, process, budget, delivery, model permit, connection, request) is one msgspec
struct whose subclasses are its types, tagged by ``type``. An event encodes as the JSON line the event log holds and the
event stream sends (``{"type": "turn.started", "timestamp": ..., "agentName": ..., ...}``):
fields left :data:`~msgspec.UNSET` are absent from it, a field set to ``None`` is ``null``, so a
producer's line keeps exactly the keys it always had.

:func:`read_event` and :func:`decode_line` read one back. A line they cannot type (a type this
runtime does not know, written by a newer one, or a field it does not expect) is kept whole as a
:class:`RawEvent`, written back unchanged: an older runtime reading a newer log loses nothing.

The package keeps one module per family (:mod:`.work` for Turns, Steps and tools,
:mod:`.approvals`, :mod:`.processes`, :mod:`.limits`, :mod:`.connections`, :mod:`.stream`), the
names in :mod:`.types`, what every event shares in :mod:`.base`, and reading and writing in
:mod:`.reading`; every name is importable from here.
"""

from __future__ import annotations

from ipc.runtime_events.approvals import (
    ApprovalCancelledEvent,
    ApprovalDecidedEvent,
    ApprovalEvent,
    ApprovalExpiredEvent,
    ApprovalRefusedEvent,
    ApprovalRequestedEvent,
    ApprovalResumedEvent,
)
from ipc.runtime_events.base import (
    UNSET,
    Number,
    RuntimeEvent,
    TokenCounts,
    given,
)
from ipc.runtime_events.connections import (
    ConnectionEvent,
    ConnectionFailedEvent,
    ConnectionFinishedEvent,
    ConnectionRecoveredEvent,
    ConnectorEventEvent,
)
from ipc.runtime_events.limits import (
    BudgetExceededEvent,
    DeliveryLostEvent,
    InboxOverflowEvent,
    ModelPermitEvent,
    ModelPermitGrantedEvent,
    ModelPermitTimeoutEvent,
    ModelPermitWaitingEvent,
    ModelRateLimitedEvent,
    RequestCancelledEvent,
)
from ipc.runtime_events.processes import (
    ProcessAdoptedEvent,
    ProcessBackoffEvent,
    ProcessBrokenFdsEvent,
    ProcessConfigAppliedEvent,
    ProcessConfigRejectedEvent,
    ProcessEvent,
    ProcessExitedEvent,
    ProcessReadyEvent,
    ProcessRestartingEvent,
    ProcessRestartRequestedEvent,
    ProcessResumePendingEvent,
    ProcessSpawnedEvent,
)
from ipc.runtime_events.reading import (
    PROCESS_FAMILY,
    AnyEvent,
    RawEvent,
    TypedEvent,
    decode_line,
    encode_event,
    event_family,
    lifecycle_kind,
    read_event,
)
from ipc.runtime_events.stream import (
    EventLogOpenedEvent,
    StreamEndEvent,
    TextDeltaEvent,
)
from ipc.runtime_events.types import (
    LIVE_ONLY,
    EventType,
)
from ipc.runtime_events.work import (
    NetworkConnectionEvent,
    StepCompletedEvent,
    StepEvent,
    StepFailedEvent,
    StepStartedEvent,
    ToolCalledEvent,
    ToolCompletedEvent,
    ToolEvent,
    ToolFailedEvent,
    TurnCancellingEvent,
    TurnCompletedEvent,
    TurnEvent,
    TurnFailedEvent,
    TurnResumedEvent,
    TurnStartedEvent,
)

__all__ = [
    "LIVE_ONLY",
    "PROCESS_FAMILY",
    "UNSET",
    "AnyEvent",
    "ApprovalCancelledEvent",
    "ApprovalDecidedEvent",
    "ApprovalEvent",
    "ApprovalExpiredEvent",
    "ApprovalRefusedEvent",
    "ApprovalRequestedEvent",
    "ApprovalResumedEvent",
    "BudgetExceededEvent",
    "ConnectionEvent",
    "ConnectionFailedEvent",
    "ConnectionFinishedEvent",
    "ConnectionRecoveredEvent",
    "ConnectorEventEvent",
    "DeliveryLostEvent",
    "EventLogOpenedEvent",
    "EventType",
    "InboxOverflowEvent",
    "ModelPermitEvent",
    "ModelPermitGrantedEvent",
    "ModelPermitTimeoutEvent",
    "ModelPermitWaitingEvent",
    "ModelRateLimitedEvent",
    "NetworkConnectionEvent",
    "Number",
    "ProcessAdoptedEvent",
    "ProcessBackoffEvent",
    "ProcessBrokenFdsEvent",
    "ProcessConfigAppliedEvent",
    "ProcessConfigRejectedEvent",
    "ProcessEvent",
    "ProcessExitedEvent",
    "ProcessReadyEvent",
    "ProcessRestartRequestedEvent",
    "ProcessRestartingEvent",
    "ProcessResumePendingEvent",
    "ProcessSpawnedEvent",
    "RawEvent",
    "RequestCancelledEvent",
    "RuntimeEvent",
    "StepCompletedEvent",
    "StepEvent",
    "StepFailedEvent",
    "StepStartedEvent",
    "StreamEndEvent",
    "TextDeltaEvent",
    "TokenCounts",
    "ToolCalledEvent",
    "ToolCompletedEvent",
    "ToolEvent",
    "ToolFailedEvent",
    "TurnCancellingEvent",
    "TurnCompletedEvent",
    "TurnEvent",
    "TurnFailedEvent",
    "TurnResumedEvent",
    "TurnStartedEvent",
    "TypedEvent",
    "decode_line",
    "encode_event",
    "event_family",
    "given",
    "lifecycle_kind",
    "read_event",
]
