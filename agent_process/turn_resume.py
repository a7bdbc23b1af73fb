"""Taking a Turn up again after its agent process died under it.

Every Turn's user message records the request it answers (``__goondanRequest``: the request
id, the attempt's Turn id and span). When the Orchestrator delivers a request again after a
crash (the same request id, ``attempt`` 2 or more), the conversation already holds what that
Turn did: every model answer and every finished tool result is on disk before the next thing
happens. So the new attempt does not start another Turn:

* a Turn that had ended (its last message is the model's answer) answers that answer again,
  without a model call;
* a Turn under which the agent died ``policy.crash.maxTurnAttempts`` times (the attempts
  that ran it, counted on its user message) is answered ``AGENT_CRASHED`` instead;
* otherwise it goes on where it stopped: recorded model answers are never asked for again;
  a call in flight is run again only when its tool is idempotent (``Tool.spec.idempotent``,
  per export too), every other one is answered ``E_TOOL_INTERRUPTED`` ("it may or may not
  have run"), and the model then answers what it has. When other Turns of the conversation
  ran while the agent was down, the unfinished Turn's messages move after them first: nothing
  is asked twice.

A request whose Turn never began here (the agent died while it was queued) simply starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from agent_process.conversation import ConversationStore, MessageEvent
from agent_process.models.base import TokenUsage
from agent_process.scope import TurnScope
from agent_process.turn_types import TurnInput, TurnResult
from ipc.runtime_events import UNSET, TurnResumedEvent
from tools_base import JsonValue, Message, ToolCall

REQUEST_KEY = "__goondanRequest"
"""The user message's metadata key naming the request its Turn answers."""
INBOUND_KEY = "__goondanInbound"
"""The metadata key every Turn's own user message carries (a correction does not)."""
NOTICE_KEY = "__goondanNotice"


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """What a conversation holds of the Turn of one request."""

    message: Message
    """The Turn's user message."""
    messages: tuple[Message, ...]
    """What the Turn added after it (up to the next Turn's user message)."""
    last: bool
    """No other Turn began after it: it can go on where it stopped."""

    @property
    def answer(self) -> Message | None:
        """The message that ended the Turn (the model's answer, or the runtime's notice in its
        place); ``None`` while the Turn was still under way."""
        if not self.messages:
            return None
        final = self.messages[-1]
        if final.role != "assistant" or final.tool_calls or not final.content:
            return None
        return final

    @property
    def runs(self) -> int:
        """The attempts that ran the Turn so far: each died under it."""
        runs = self.previous.get("runs", 1)
        return runs if isinstance(runs, int) and runs > 0 else 1

    @property
    def previous(self) -> dict[str, JsonValue]:
        """The request record of the attempt that wrote the user message last."""
        record = self.message.metadata.get(REQUEST_KEY)
        return record if isinstance(record, dict) else {}

    def attempt(self, delivery: int) -> int:
        """The number of the attempt that takes the Turn up now, delivered as ``delivery``:
        past every attempt that ran it, even when a daemon restart began counting its
        deliveries again from 1."""
        return max(delivery, self.runs + 1)

    def interrupted_calls(
        self, *, rerun: frozenset[str], parked: set[str], sequential: bool
    ) -> list[ToolCall]:
        """The calls the Turn asked for that have no result and must not run again: they are
        answered ``E_TOOL_INTERRUPTED``. Left open for the resumed Turn to run: calls of a
        tool in ``rerun`` (idempotent), calls parked for approval (``parked``) and, when the
        calls of one model answer run one after another (``sequential``), those after the
        first open one (they never started)."""
        calling = _open_calls(self.messages)
        closed = [call for calls in calling[:-1] for call in calls]  # older Steps': never run
        for index, call in enumerate(calling[-1] if calling else []):
            never_started = sequential and index > 0
            if not (call.id in parked or call.name in rerun or never_started):
                closed.append(call)
        return closed


def _open_calls(messages: Sequence[Message]) -> list[list[ToolCall]]:
    """The calls without a result of each assistant message that has any, in order."""
    answered = {m.source.tool_call_id for m in messages if m.role == "tool"}
    calling = [
        [call for call in m.tool_calls if call.id not in answered]
        for m in messages
        if m.role == "assistant"
    ]
    return [calls for calls in calling if calls]


def request_record(
    request_id: str, turn_id: str, span_id: str, attempt: int, runs: int = 1
) -> JsonValue:
    """The ``__goondanRequest`` metadata of a Turn's user message: ``runs`` counts the
    attempts that ran the Turn (a delivery that found it dead and took it up is one)."""
    return {
        "requestId": request_id,
        "turnId": turn_id,
        "spanId": span_id,
        "attempt": attempt,
        "runs": runs,
    }


def gave_up(agent: str, runs: int, limit: int) -> str:
    """Why a Turn under which ``agent`` died ``runs`` times is not taken up again."""
    times = "once" if runs == 1 else f"{runs} times"
    return (
        f"agent {agent!r} exited before answering: it died under this Turn {times} "
        f"(policy.crash.maxTurnAttempts: {limit})"
    )


def find_turn(messages: Sequence[Message], request_id: str) -> RecordedTurn | None:
    """The Turn of ``request_id`` in ``messages`` (its latest, should it have begun twice),
    or ``None`` when none began here."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "user":
            continue
        record = message.metadata.get(REQUEST_KEY)
        if isinstance(record, dict) and record.get("requestId") == request_id:
            after = messages[index + 1 :]
            end = next((i for i, m in enumerate(after) if _begins_turn(m)), None)
            added = after if end is None else after[:end]
            return RecordedTurn(message, tuple(added), last=end is None)
    return None


def move_to_end(store: ConversationStore, recorded: RecordedTurn) -> RecordedTurn:
    """Move the unfinished Turn ``recorded``, whose conversation went on with other Turns
    while its agent was down, after them: its messages stay together and none is asked twice
    (the model then sees the later Turns before it)."""
    moved = (recorded.message, *recorded.messages)
    for message in moved:
        store.emit(MessageEvent.remove(message.id))
    for message in moved:
        store.emit(MessageEvent.append(message))
    return dataclasses.replace(recorded, last=True)


def _begins_turn(message: Message) -> bool:
    return message.role == "user" and INBOUND_KEY in message.metadata


def mark_attempt(
    store: ConversationStore, recorded: RecordedTurn, turn_id: str, span_id: str, attempt: int
) -> None:
    """Record on the Turn's user message that attempt ``attempt`` (``turn_id``, ``span_id``)
    has it now, so a later attempt links to this one. Only resumed Turns pay this (a replace
    makes the Turn's fold rewrite the base)."""
    request_id = str(recorded.previous.get("requestId", ""))
    record = request_record(request_id, turn_id, span_id, attempt, recorded.runs + 1)
    metadata = {**recorded.message.metadata, REQUEST_KEY: record}
    store.emit(
        MessageEvent.replace(
            recorded.message.id, dataclasses.replace(recorded.message, metadata=metadata)
        )
    )


def resumed_event(
    scope: TurnScope, turn_input: TurnInput, recorded: RecordedTurn, *, replayed: bool
) -> TurnResumedEvent:
    """``turn.resumed``: the next attempt takes up ``recorded`` (linked to the span of the
    attempt before it)."""
    previous = recorded.previous
    turn_id, span_id = previous.get("turnId"), previous.get("spanId")
    return TurnResumedEvent(
        turn_id=scope.turn_id,
        request_id=turn_input.request_id,
        attempt=recorded.attempt(turn_input.attempt),
        resumed_turn_id=turn_id if isinstance(turn_id, str) else UNSET,
        resumed_span_id=span_id if isinstance(span_id, str) else UNSET,
        replayed=replayed,
    )


def recorded_result(
    scope: TurnScope, answer: Message, *, max_steps: int, as_error: bool
) -> TurnResult:
    """The result of a Turn that ended with ``answer`` (the model's, or the runtime's notice
    in its place), given again: no Step runs, nothing is used."""
    usage = TokenUsage()
    kind = answer.metadata.get(NOTICE_KEY)
    if kind == "empty_output":
        return TurnResult.no_answer(scope, steps=0, usage=usage, restart_reason=None)
    if kind == "max_steps":
        return TurnResult.out_of_steps(
            scope,
            max_steps=max_steps,
            text=answer.content,
            usage=usage,
            restart_reason=None,
            as_error=as_error,
        )
    return TurnResult.answered(scope, answer.content, steps=0, usage=usage, restart_reason=None)
