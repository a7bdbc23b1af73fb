"""The wire between the Orchestrator and its AgentProcesses: messages, frames, channels.

:mod:`ipc.protocol` is the protocol both sides speak (kinds, ids, shared constants, building
messages), its payloads typed in :mod:`ipc.delegation`, :mod:`ipc.events` and :mod:`ipc.questions`;
:mod:`ipc.messages` the envelope and the errors that cross the pipe; :mod:`ipc.codec` the frames;
:mod:`ipc.channel` an asyncio channel over one end of a pipe.
"""

from typing import TYPE_CHECKING

from goondan.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from ipc.channel import Channel, ChannelClosed, ChannelStatistics, PeerGone
    from ipc.codec import MAX_FRAME_BYTES, FrameDecoder, FrameTooLarge, IpcProtocolError, encode
    from ipc.messages import (
        AgentCrashed,
        AgentNotFound,
        AgentUnavailable,
        BudgetExceeded,
        Cancelled,
        CircularCall,
        DelegateMessage,
        DelegateResultMessage,
        EmptyInput,
        EventMessage,
        IpcError,
        IpcMessage,
        NodeAbsent,
        PermitTimeout,
        RequestTimeout,
        ShutdownMessage,
        ShuttingDown,
        TooManyPending,
        TurnFailed,
        parse_message,
    )
    from ipc.protocol import DEFAULT_INSTANCE_KEY, EXTERNAL_CALLER, ORCHESTRATOR, EventKind


__all__ = [
    "DEFAULT_INSTANCE_KEY",
    "EXTERNAL_CALLER",
    "MAX_FRAME_BYTES",
    "ORCHESTRATOR",
    "AgentCrashed",
    "AgentNotFound",
    "AgentUnavailable",
    "BudgetExceeded",
    "Cancelled",
    "Channel",
    "ChannelClosed",
    "ChannelStatistics",
    "CircularCall",
    "DelegateMessage",
    "DelegateResultMessage",
    "EmptyInput",
    "EventKind",
    "EventMessage",
    "FrameDecoder",
    "FrameTooLarge",
    "IpcError",
    "IpcMessage",
    "IpcProtocolError",
    "NodeAbsent",
    "PeerGone",
    "PermitTimeout",
    "RequestTimeout",
    "ShutdownMessage",
    "ShuttingDown",
    "TooManyPending",
    "TurnFailed",
    "encode",
    "parse_message",
]
_HOMES = {
    **dict.fromkeys(
        (
            "Channel",
            "ChannelClosed",
            "ChannelStatistics",
            "PeerGone",
        ),
        "ipc.channel",
    ),
    **dict.fromkeys(
        (
            "MAX_FRAME_BYTES",
            "FrameDecoder",
            "FrameTooLarge",
            "IpcProtocolError",
            "encode",
        ),
        "ipc.codec",
    ),
    **dict.fromkeys(
        (
            "AgentCrashed",
            "AgentNotFound",
            "AgentUnavailable",
            "BudgetExceeded",
            "Cancelled",
            "CircularCall",
            "DelegateMessage",
            "DelegateResultMessage",
            "EmptyInput",
            "EventMessage",
            "IpcError",
            "IpcMessage",
            "NodeAbsent",
            "PermitTimeout",
            "RequestTimeout",
            "ShutdownMessage",
            "ShuttingDown",
            "TooManyPending",
            "TurnFailed",
            "parse_message",
        ),
        "ipc.messages",
    ),
    **dict.fromkeys(
        (
            "DEFAULT_INSTANCE_KEY",
            "EXTERNAL_CALLER",
            "ORCHESTRATOR",
            "EventKind",
        ),
        "ipc.protocol",
    ),
}
"""The module each public name lives in, imported when the name is first asked for: importing
one module of the package (the CLI reads an answer with :mod:`ipc.delegation`) does not import
them all, as :mod:`ipc.channel` brings asyncio, multiprocessing and structlog."""

if not TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _HOMES)
