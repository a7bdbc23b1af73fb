"""The connections a tool call's sandboxed program makes through the network proxy, recorded on
the call's span: one ``network.connection`` event each (host, port, address, allowed or
refused and why, bytes each way), which the event log keeps and the studio shows on the span."""

from __future__ import annotations

from agent_process.events import EventRecorder
from ipc.runtime_events import NetworkConnectionEvent
from tools_base import ToolCall
from tools_base.sandbox import Connection, ConnectionSink


def connection_recorder(
    recorder: EventRecorder, call: ToolCall, *, span: str, step_span: str, step_id: str,
    turn_id: str,
) -> ConnectionSink:  # fmt: skip
    """A sink for :data:`tools_base.sandbox.connection_sink` that records on ``span``."""

    def record(connection: Connection) -> None:
        event = NetworkConnectionEvent(
            tool_call_id=call.id,
            tool_name=call.name,
            step_id=step_id,
            turn_id=turn_id,
            protocol=connection.protocol,
            host=connection.host,
            port=connection.port,
            address=connection.address,
            allowed=connection.allowed,
            reason=connection.reason,
            bytes_up=connection.bytes_up,
            bytes_down=connection.bytes_down,
            duration=round(connection.duration_ms, 3),
        )
        recorder.emit(event, span, step_span)

    return record
