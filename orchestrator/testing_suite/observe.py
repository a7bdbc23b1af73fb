"""What a case's run showed, gathered from the runtime events its daemon recorded."""

from __future__ import annotations

from dataclasses import dataclass, field

from ipc.delegation import DelegateAnswer
from ipc.runtime_events import (
    AnyEvent,
    ProcessSpawnedEvent,
    StepCompletedEvent,
    StepFailedEvent,
    TokenCounts,
    ToolCalledEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    TurnFailedEvent,
)

HANDOFF_TOOLS = frozenset({"agents__request", "agents__send"})
"""The calls that hand work to another agent: their ``target`` received a handoff."""


@dataclass(slots=True)
class ToolCallSeen:
    """One tool call as the case's agents made it."""

    agent: str
    name: str
    args: dict[str, object]
    pid: int | None
    """The agent process that ran it."""
    status: str = "called"
    """``ok``, ``error`` (a result with an error, or a raised call), or ``called``."""
    call_id: str = ""

    def to_json(self) -> dict[str, object]:
        """The ``--json`` form."""
        return {
            "agent": self.agent,
            "name": self.name,
            "args": self.args,
            "status": self.status,
            "pid": self.pid,
        }


@dataclass(slots=True)
class Observation:
    """Everything a case's expectations are checked against."""

    answers: list[DelegateAnswer] = field(default_factory=list)
    """The answer of each Turn the case sent, in order."""
    tools: list[ToolCallSeen] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    """Turns that failed and tool calls that raised, each described."""
    pids: dict[str, int] = field(default_factory=dict)
    """The process of each agent that ran."""

    @property
    def answer(self) -> str:
        """The last Turn's answer text."""
        last = self.answers[-1] if self.answers else None
        return "" if last is None or last.output is None else str(last.output)

    @property
    def handoffs(self) -> list[str]:
        """The agents that received an ``agents__request`` (or a send), in order."""
        return [
            str(call.args.get("target"))
            for call in self.tools
            if call.name in HANDOFF_TOOLS and "target" in call.args
        ]

    def observe(self, event: AnyEvent) -> None:
        """Take one runtime event into account (an event-log listener)."""
        if isinstance(event, ProcessSpawnedEvent) and isinstance(event.pid, int):
            self.pids[event.agent_name] = event.pid
        elif isinstance(event, ToolCalledEvent):
            args = event.args if isinstance(event.args, dict) else {}
            self.tools.append(
                ToolCallSeen(
                    agent=event.agent_name,
                    name=str(event.tool_name),
                    args=args,
                    pid=self.pids.get(event.agent_name),
                    call_id=str(event.tool_call_id),
                )
            )
        elif isinstance(event, ToolCompletedEvent | ToolFailedEvent):
            status = "error" if isinstance(event, ToolFailedEvent) else str(event.status)
            for call in reversed(self.tools):
                if call.call_id == str(event.tool_call_id) and call.agent == event.agent_name:
                    call.status = status
                    break
            if status == "error":
                self.errors.append(
                    f"tool call {event.tool_name} of agent {event.agent_name!r} failed"
                    + (f": {event.error_message}" if isinstance(event.error_message, str) else "")
                )
        elif isinstance(event, StepCompletedEvent | StepFailedEvent):
            self.steps += 1
            usage = event.token_usage
            if isinstance(usage, TokenCounts):
                self.tokens += usage.total_tokens
        elif isinstance(event, TurnFailedEvent):
            message = event.error_message if isinstance(event.error_message, str) else ""
            self.errors.append(
                f"a Turn of agent {event.agent_name!r} failed: {message}".rstrip(": ")
            )
