"""The AG-UI events of one run (:mod:`orchestrator.http.ag_ui` says what they mean): the
items of its request's :class:`~orchestrator.http.streams.TurnStream` (text, the runtime
events of its Steps, tool calls and approvals, its answer) as ``ag-ui-protocol`` events, and
those encoded for the response. The package is imported as a run needs it (the ``agui``
extra)."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import msgspec
import structlog

from goondan.errors import DeliveryCode
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import (
    ApprovalEvent,
    ApprovalRequestedEvent,
    StepCompletedEvent,
    StepEvent,
    StepFailedEvent,
    StepStartedEvent,
    TokenCounts,
    ToolCalledEvent,
    ToolCompletedEvent,
    ToolEvent,
    ToolFailedEvent,
    given,
)
from orchestrator.http.streams import Item, Notice, Piece, TurnStream, not_answered_here

if TYPE_CHECKING:
    from ag_ui.core import BaseEvent, Interrupt, RunAgentInput, TokenUsage
    from ag_ui.encoder import EventEncoder

INTERRUPT_REASON = "tool_approval"
"""The ``reason`` of the interrupt a parked tool call becomes."""
RESUME_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "arguments": {"type": "object"},
        "reason": {"type": "string"},
    },
    "required": ["approved"],
}
"""What a ``ResumeEntry.payload`` answering an approval holds."""

_log = structlog.get_logger("goondan.api")


@dataclass(frozen=True, slots=True)
class PausedRun:
    """Where a run stopped on an interrupt: its request, and the feed's number of the
    approval event (the resumed run streams what came after it)."""

    request_id: str
    seq: int


async def encoded(
    batches: AsyncIterator[list[BaseEvent | None]], encoder: EventEncoder
) -> AsyncIterator[bytes]:
    """``batches`` as the response's bytes, one chunk (one write) per batch: each event as
    the package's encoder writes it (:func:`event_bytes`), a keepalive (``None``) as an SSE
    comment."""
    async for batch in batches:
        yield b"".join(
            b": keepalive\n\n" if event is None else event_bytes(event, encoder) for event in batch
        )


def event_bytes(event: BaseEvent, encoder: EventEncoder) -> bytes:
    """``event`` as ``encoder`` writes it: ``data: {JSON}`` of its wire fields in their
    order, an optional field without a value left out.

    An event whose values are all text, whole numbers or ``None`` (the text, Step and tool
    call events, most of a run) is written here from its fields, the same bytes (compact JSON,
    UTF-8, the same escapes) at a fraction of the cost of the package's serializer, which
    runs a Python wrapper per model; any other event is the package's to write.
    """
    wire: dict[str, object] = {}
    if not event.__pydantic_extra__:
        for name, key, omittable in _wire_fields(type(event)):
            value = getattr(event, name)
            if value is None:
                if omittable:
                    continue
            elif isinstance(value, Enum):
                value = value.value
            elif type(value) is not str and type(value) is not int:
                break
            wire[key] = value
        else:
            try:
                return b"data: " + msgspec.json.encode(wire) + b"\n\n"
            except UnicodeEncodeError:
                pass  # the package's serializer says what is wrong
    return encoder.encode(event).encode()


@functools.cache
def _wire_fields(model: type[BaseEvent]) -> tuple[tuple[str, str, bool], ...]:
    """Each field of an event model: its attribute, its key on the wire, and whether it is
    left out without a value (optional, defaulting to ``None``: the package's rule)."""
    return tuple(
        (
            name,
            field.serialization_alias or field.alias or name,
            not field.is_required() and field.default is None,
        )
        for name, field in model.model_fields.items()
    )


class RunEvents:
    """The AG-UI events of one run, from the items of its request's :class:`TurnStream`."""

    def __init__(
        self,
        turn: TurnStream,
        run_input: RunAgentInput,
        remember: Callable[[str, PausedRun], None],
    ) -> None:
        self.turn = turn
        self.thread_id, self.run_id = run_input.thread_id, run_input.run_id
        self.remember = remember
        self.steps: list[str] = []
        """Steps started in this run and not finished yet."""
        self.message: str | None = None
        """The text message open now."""
        self.texts = 0
        """Text messages this run sent."""

    def _own(self, event: StepEvent | ToolEvent) -> bool:
        """Whether ``event`` is of the asked agent's Turn (not of one it delegated to)."""
        turn = self.turn
        return event.agent_name == turn.agent and event.instance == turn.instance_key

    async def events(self) -> AsyncIterator[list[BaseEvent | None]]:
        """Every event of the run (``None`` for a keepalive), in batches: a batch is all the
        events the stream's items hold at once, so a burst (a Step's end, the answer, the
        run's end) is one write and wakes the client once, while nothing ready is held."""
        from ag_ui.core import PROTOCOL_VERSION, RunStartedEvent

        turn = self.turn
        batch: list[BaseEvent | None] = [
            RunStartedEvent(
                thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION
            )
        ]
        if not turn.ready():
            yield batch  # the run has started: say so before waiting for its first item
            batch = []
        item: Item = await turn.first()
        rest = turn.rest()
        while True:
            if item is None:
                batch.append(None)
            elif isinstance(item, Piece):
                batch += self._text(item)
            elif isinstance(item, Notice):
                if isinstance(item.event, ApprovalRequestedEvent):
                    batch += self._interrupt(item)
                    break
                batch += self._notice(item)
            else:
                batch += self._end(item)
                break
            if not turn.ready():
                yield batch
                batch = []
            try:
                item = await anext(rest)
            except StopAsyncIteration:  # the daemon stops under the request
                batch += self._end(not_answered_here())
                break
        yield batch

    def _close_text(self) -> list[BaseEvent]:
        from ag_ui.core import TextMessageEndEvent

        if self.message is None:
            return []
        closed, self.message = self.message, None
        return [TextMessageEndEvent(message_id=closed)]

    def _open(self, step_id: str) -> list[BaseEvent]:
        """``STEP_STARTED`` for a Step this run has not opened (one that began before the run
        picked the Turn up), so every run's Steps stay balanced."""
        from ag_ui.core import StepStartedEvent as StepOpened

        if not step_id or step_id in self.steps:
            return []
        self.steps.append(step_id)
        return [StepOpened(step_name=step_id)]

    def _text(self, piece: Piece) -> list[BaseEvent]:
        from ag_ui.core import TextMessageContentEvent, TextMessageStartEvent

        if piece.agent != self.turn.agent:
            return []
        message_id = f"msg_{piece.delta.step_id}"
        out = self._open(piece.delta.step_id)
        if self.message != message_id:
            out += self._close_text()
            out.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
            self.message = message_id
            self.texts += 1
        out.append(TextMessageContentEvent(message_id=message_id, delta=piece.text))
        return out

    def _notice(self, notice: Notice) -> list[BaseEvent]:
        from ag_ui.core import (
            CustomEvent,
            StepFinishedEvent,
            ToolCallArgsEvent,
            ToolCallEndEvent,
            ToolCallResultEvent,
            ToolCallStartEvent,
        )

        event = notice.event
        if isinstance(event, ApprovalEvent):
            return [CustomEvent(name=f"goondan.{event.type.value}", value=event.to_builtins())]
        if not isinstance(event, StepEvent | ToolEvent) or not self._own(event):
            return []
        if isinstance(event, StepEvent):
            name = given(event.step_id) or ""
            if isinstance(event, StepStartedEvent):
                return self._open(name)
            if not isinstance(event, StepCompletedEvent | StepFailedEvent):
                return []
            out = [*self._close_text(), *self._open(name)]
            if name in self.steps:
                self.steps.remove(name)
            return [*out, StepFinishedEvent(step_name=name)]
        call_id = given(event.tool_call_id) or ""
        step_id = given(event.step_id) or ""
        if isinstance(event, ToolCalledEvent):
            parent = self.message or f"msg_{step_id}"
            out = [*self._close_text(), *self._open(step_id)]
            args = event.args if given(event.args) is not None else {}
            return [
                *out,
                ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=given(event.tool_name) or "",
                    parent_message_id=parent,
                ),
                ToolCallArgsEvent(tool_call_id=call_id, delta=_json(args)),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        if isinstance(event, ToolCompletedEvent):
            output = event.output if given(event.status) == "ok" else event.error
            content = _json(given(output))
        elif isinstance(event, ToolFailedEvent):
            content = _json({"error": given(event.error_message)})
        else:
            return []
        result = ToolCallResultEvent(
            message_id=f"result_{call_id}", tool_call_id=call_id, content=content, role="tool"
        )
        return [*self._open(step_id), result]

    def _interrupt(self, first: Notice) -> list[BaseEvent]:
        """The run ends waiting: every approval parked by now becomes an interrupt."""
        from ag_ui.core import RunFinishedEvent, RunFinishedInterruptOutcome, StepFinishedEvent

        notices = [first]
        waiting = self.turn.pieces
        while waiting and isinstance(waiting[0], Notice):
            more = waiting[0]
            if not isinstance(more.event, ApprovalRequestedEvent):
                break
            notices.append(more)
            waiting.popleft()
        out = self._close_text()
        out += [StepFinishedEvent(step_name=name) for name in self.steps]
        self.steps.clear()
        interrupts = [self._interruption(notice) for notice in notices]
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome))
        return out

    def _interruption(self, notice: Notice) -> Interrupt:
        from ag_ui.core import Interrupt

        event = notice.event
        assert isinstance(event, ApprovalRequestedEvent)
        approval_id = given(event.approval_id) or ""
        tool = given(event.tool_name) or "a tool"
        self.remember(approval_id, PausedRun(self.turn.request_id, notice.seq))
        goondan = {
            "agent": event.agent_name,
            "instanceKey": event.instance,
            "tool": tool,
            "arguments": given(event.args),
            "requestId": self.turn.request_id,
        }
        return Interrupt(
            id=approval_id,
            reason=INTERRUPT_REASON,
            message=f"{event.agent_name} asks to call {tool}",
            tool_call_id=given(event.tool_call_id),
            response_schema=RESUME_SCHEMA,
            expires_at=given(event.expires_at),
            metadata={"goondan": goondan},
        )

    def _end(self, answer: DelegateAnswer) -> list[BaseEvent]:
        from ag_ui.core import (
            RunErrorEvent,
            RunFinishedEvent,
            StepFinishedEvent,
            TextMessageContentEvent,
            TextMessageEndEvent,
            TextMessageStartEvent,
        )

        out = self._close_text()
        out += [StepFinishedEvent(step_name=name) for name in self.steps]
        self.steps.clear()
        if not answer.ok:
            failure = answer.error or IpcError(
                "the request failed", code=DeliveryCode.AGENT_TURN_FAILED
            )
            return [*out, RunErrorEvent(message=failure.message, code=failure.code)]
        text = answer.output if isinstance(answer.output, str) else _json(answer.output)
        if not self.texts and text:  # a Turn whose model did not stream still answers
            message_id = answer_message_id(answer, self.turn.request_id)
            out += [
                TextMessageStartEvent(message_id=message_id, role="assistant"),
                TextMessageContentEvent(message_id=message_id, delta=text),
                TextMessageEndEvent(message_id=message_id),
            ]
        finished = RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            result=answer.output,
            usage=_usage(answer),
        )
        if self.turn.dropped:
            _log.warning(
                "streamed deltas dropped for a slow client",
                agent=self.turn.agent,
                dropped=self.turn.dropped,
            )
        return [*out, finished]


def answer_message_id(answer: DelegateAnswer, request_id: str) -> str:
    """The id of the text message that carries a Turn's answer when its text did not stream
    in this run: that of its last Step (Steps are named ``{turnId}-step-{index}``), so a run
    replaying a recorded answer names the message as the live run did."""
    turn = answer.turn or {}
    turn_id, steps = turn.get("turnId"), turn.get("stepCount")
    if isinstance(turn_id, str) and turn_id and isinstance(steps, int) and steps > 0:
        return f"msg_{turn_id}-step-{steps - 1}"
    return f"msg_{request_id}"


def _usage(answer: DelegateAnswer) -> list[TokenUsage] | None:
    from ag_ui.core import TokenUsage

    counts = TokenCounts.read((answer.turn or {}).get("tokenUsage"))
    if not counts.total_tokens and not counts.input_tokens and not counts.output_tokens:
        return None
    total = counts.input_tokens + counts.output_tokens
    return [
        TokenUsage(
            input_tokens=counts.input_tokens, output_tokens=counts.output_tokens, total_tokens=total
        )
    ]


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
