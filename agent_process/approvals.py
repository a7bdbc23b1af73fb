"""Tool calls parked for a human's approval (``Agent.spec.toolPolicy.approval``).

When the model calls a tool the policy names, the Step does not run it: the call is *parked*.
The assistant message holding the call is already in ``events.jsonl`` and is fsynced, then the
approval is written (atomically, fsynced) and an ``approval.requested`` runtime event goes to
the event log. The Turn waits, holding its instance's queue like any running Turn, until an
operator decides (``approval_decision`` from the Orchestrator) or the deadline passes:

- approve: the call runs (with the operator's arguments in place of the model's, if given);
- reject: the model gets ``E_TOOL_REJECTED`` with the operator's reason;
- deadline: the model gets ``E_TOOL_APPROVAL_TIMEOUT``.

On disk, per instance, one record per parked call
(``agents/<agent>/instances/<instance>/approvals/<approvalId>.json``; the format is
:mod:`goondan.state_files.approvals`).

``started`` is set (durably) right before an approved call runs, ``settled`` once its result
is in the conversation. A process that dies with a record unsettled resumes it when it starts
again (:meth:`ApprovalGate.unsettled_instances`): a pending one is parked again with the same
deadline (expiry keeps counting while nothing runs), a decided one is carried out, and an
approved one that had ``started`` is answered ``E_TOOL_INTERRUPTED`` (it may have run; a call
runs at most once). Decided records stay on disk, so deciding twice is refused (409).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import structlog

from agent_process.conversation import ConversationStorageError, ConversationStore
from agent_process.events import capped, new_span_id
from agent_process.scope import StepScope, TurnCancelled
from agent_process.storage import RecordMirror
from agent_process.tools.registry import ToolRegistry
from agent_process.tools.schema import format_issues
from goondan.defaults import APPROVAL_TIMEOUT_SECONDS
from goondan.state_files.approvals import (
    DIRECTORY,
    Approval,
    Status,
    read_approvals,
    write_approval,
)
from goondan.time import utc_timestamp
from ipc.protocol import APPROVAL_ALREADY_DECIDED, APPROVAL_INVALID_ARGUMENTS, APPROVAL_NOT_FOUND
from ipc.runtime_events import (
    ApprovalCancelledEvent,
    ApprovalDecidedEvent,
    ApprovalEvent,
    ApprovalExpiredEvent,
    ApprovalRequestedEvent,
    ApprovalResumedEvent,
)
from tools_base import JsonObject, ToolCall

_log = structlog.get_logger("goondan.approvals")


def new_approval_id() -> str:
    """Unique across agents and restarts (a model's tool call ids are not: the scripted
    model counts from 1 in every process)."""
    return f"apr_{secrets.token_hex(8)}"


class ApprovalSuspended(Exception):
    """The agent is stopping while a call waits for approval: the Turn ends here, the call
    stays parked on disk and is resumed when the agent starts again."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(
            f"the Turn is parked on approval {approval_id!r} and the agent is stopping; "
            "it resumes when the agent starts again"
        )
        self.approval_id = approval_id


class DecisionRefused(Exception):
    """An operator's decision that cannot be taken; ``code`` is an ``APPROVAL_*`` code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Decision:
    """What a parked call comes to."""

    outcome: Literal["approved", "rejected", "expired", "cancelled", "interrupted"]
    approval: Approval


class ApprovalGate:
    """Parks the calls the policy names and carries out operators' decisions, for every
    instance of one agent; the records on disk are the truth, mirrored in memory."""

    def __init__(
        self,
        agent_name: str,
        instances_root: Path,
        *,
        tools: frozenset[str],
        timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS,
        registry: ToolRegistry | None = None,
        allow_registry_calls: bool = False,
        clock: Callable[[], float] = time.time,
        mirror: RecordMirror | None = None,
    ) -> None:
        """``mirror`` gets a copy of every record written (a cluster node's agents)."""
        self.agent_name = agent_name
        self._mirror = mirror
        self.root = instances_root
        self.tools = tools
        self.timeout_seconds = timeout_seconds
        self._registry = registry
        self._allow_registry_calls = allow_registry_calls
        self._clock = clock
        self._records: dict[str, Approval] = {}
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._suspended = False
        self._turns: set[str] = set()
        """Turns that parked a call, until they end."""
        self._log = _log.bind(agent=agent_name)

    # -- boot ----------------------------------------------------------------------------------

    def load(self) -> list[str]:
        """Read the records left on disk; the instance keys that have unsettled ones (each
        needs a Turn that resumes it)."""
        self._records = {a.approval_id: a for a in read_approvals(self.root, _log)}
        keys = {a.instance_key for a in self._records.values() if not a.settled}
        return sorted(keys)

    # -- the Step's side -------------------------------------------------------------------------

    def needs_approval(self, call: ToolCall, allowlist: frozenset[str], instance_key: str) -> bool:
        """Whether ``call`` is parked: it has an unsettled record already (a resumed Turn: its
        decision stands even if the policy changed since), or the policy names it and the
        executor would run it (a call it would refuse anyway, outside the catalog or with
        invalid arguments, is not put before an operator)."""
        if any(a.tool_call_id == call.id for a in self.unsettled(instance_key)):
            return True
        if call.name not in self.tools:
            return False
        if call.name not in allowlist and not self._allow_registry_calls:
            return False
        tool = self._registry.get(call.name) if self._registry is not None else None
        if tool is None:
            return self._registry is None
        return isinstance(call.args, dict) and not tool.validator.validate(call.args)

    def unsettled(self, instance_key: str) -> list[Approval]:
        """The instance's records whose result is not yet in its conversation."""
        return [
            a for a in self._records.values() if a.instance_key == instance_key and not a.settled
        ]

    def open_call_ids(self, instance_key: str) -> set[str]:
        """Tool call ids of the instance a Turn must not close as interrupted."""
        return {a.tool_call_id for a in self.unsettled(instance_key)}

    async def review(
        self, call: ToolCall, scope: StepScope, directory: Path, store: ConversationStore
    ) -> Decision:
        """Park ``call`` (or take up its unsettled record after a restart) until it is decided
        or expires. Raises :class:`ApprovalSuspended` when the agent stops meanwhile, and
        ``ConversationStorageError`` when the conversation cannot be synced."""
        turn = scope.turn
        approval = next(
            (a for a in self.unsettled(turn.instance_key) if a.tool_call_id == call.id), None
        )
        span = new_span_id()
        self._turns.add(turn.turn_id)
        if approval is None:
            # The assistant message holding the call must be durable before anyone can
            # approve it: the resumed Turn after a restart is rebuilt from it.
            store.sync()
            now = self._clock()
            approval = Approval(
                approval_id=new_approval_id(),
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=dict(call.args) if isinstance(call.args, dict) else {},
                agent_name=self.agent_name,
                instance_key=turn.instance_key,
                trace_id=turn.trace_id,
                turn_id=turn.turn_id,
                requested_at=utc_timestamp(now),
                expires_at_unix=now + self.timeout_seconds,
            )
            approval.path = directory / DIRECTORY / f"{approval.approval_id}.json"
            self._write(approval)
            self._records[approval.approval_id] = approval
            requested = _event(ApprovalRequestedEvent, approval)
            requested.args = capped(approval.arguments)
            turn.recorder.emit(requested, span, scope.span_id)
            turn.logger.warning(
                "tool call waits for approval",
                approval_id=approval.approval_id,
                tool=call.name,
                tool_call_id=call.id,
                expires_at=utc_timestamp(approval.expires_at_unix),
            )
        else:
            turn.recorder.emit(_event(ApprovalResumedEvent, approval), span, scope.span_id)
            turn.logger.info(
                "resuming a call parked for approval",
                approval_id=approval.approval_id,
                status=approval.status,
            )
        await self._wait(approval, scope, span)
        if approval.status in ("approved", "rejected"):
            decided = _event(ApprovalDecidedEvent, approval)
            decided.reason = approval.reason
            decided.edited_args = capped(approval.decided_arguments)
            decided.decided_by = approval.decided_by
            turn.recorder.emit(decided, span, scope.span_id)
        if approval.status == "approved":
            return Decision("interrupted" if approval.started else "approved", approval)
        return Decision(approval.status, approval)  # type: ignore[arg-type]  # not pending

    async def _wait(self, approval: Approval, scope: StepScope, span: str) -> None:
        """Until ``approval`` is decided, or expired (then recorded so)."""
        loop = asyncio.get_running_loop()
        while approval.status == "pending":
            if self._suspended:
                raise ApprovalSuspended(approval.approval_id)
            remaining = approval.expires_at_unix - self._clock()
            if remaining <= 0:
                self._close(approval, "expired", None)
                scope.turn.recorder.emit(
                    _event(ApprovalExpiredEvent, approval), span, scope.span_id
                )
                scope.turn.logger.warning(
                    "approval expired", approval_id=approval.approval_id, tool=approval.tool_name
                )
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters[approval.approval_id] = waiter
            try:
                async with asyncio.timeout(remaining):
                    await scope.turn.cancellation.abortable(waiter)
            except TimeoutError:
                continue  # the loop records the expiry
            except TurnCancelled as cancelled:  # an operator cancelled the request: no decision
                self._close(approval, "cancelled", str(cancelled))
                scope.turn.recorder.emit(
                    _event(ApprovalCancelledEvent, approval), span, scope.span_id
                )
                return
            finally:
                if self._waiters.get(approval.approval_id) is waiter:
                    del self._waiters[approval.approval_id]

    def withdraw(self, call: ToolCall, scope: StepScope, reason: str | None) -> Approval | None:
        """The request of a Turn that would take up ``call``'s record was cancelled: the
        record is closed ``cancelled`` (the call does not run); ``None`` if it has none."""
        approval = next(
            (a for a in self.unsettled(scope.turn.instance_key) if a.tool_call_id == call.id),
            None,
        )
        if approval is None:
            return None
        if approval.status == "pending":
            self._close(approval, "cancelled", reason)
        return approval

    def _close(self, approval: Approval, status: Status, reason: str | None) -> None:
        approval.status = status
        approval.decided_at = utc_timestamp(self._clock())
        approval.reason = reason
        self._write(approval)

    def turn_done(self, turn_id: str) -> bool:
        """Forget Turn ``turn_id``; whether it parked a call."""
        if turn_id in self._turns:
            self._turns.discard(turn_id)
            return True
        return False

    def mark_started(self, approval: Approval) -> None:
        """Durably note that the approved call runs now: after a crash it is not run again."""
        approval.started = True
        self._write(approval)

    def settle(self, approval: Approval) -> None:
        """The call's result is in the conversation: nothing is left to resume."""
        approval.settled = True
        try:
            self._write(approval)
        except ConversationStorageError as exc:  # the result is in the conversation already
            self._log.warning(
                "approval not marked settled", approval_id=approval.approval_id, error=str(exc)
            )

    # -- the operator's side ---------------------------------------------------------------------

    def decide(
        self,
        approval_id: str,
        decision: Literal["approve", "reject"],
        *,
        arguments: JsonObject | None = None,
        reason: str = "",
        decided_by: JsonObject | None = None,
    ) -> Approval:
        """Record an operator's decision, and ``decided_by`` who made it (durably), and wake
        the Turn parked on it.

        Raises :class:`DecisionRefused`: no such approval, already decided or expired, or
        edited arguments that fail the tool's JSON Schema.
        """
        approval = self._pending(approval_id)
        if decision == "approve" and arguments is not None:
            self._check_arguments(approval, arguments)
        approval.status = "approved" if decision == "approve" else "rejected"
        approval.decided_at = utc_timestamp(self._clock())
        approval.decided_arguments = arguments if decision == "approve" else None
        approval.reason = reason or None
        approval.decided_by = decided_by
        try:
            self._write(approval)
        except ConversationStorageError:
            approval.status, approval.decided_at = "pending", None
            approval.decided_arguments, approval.reason = None, None
            approval.decided_by = None
            raise
        self._log.info(
            "approval decided",
            approval_id=approval_id,
            instance_key=approval.instance_key,
            trace_id=approval.trace_id,
            status=approval.status,
            edited=arguments is not None,
            decided_by=decided_by,
        )
        waiter = self._waiters.get(approval_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return approval

    def _pending(self, approval_id: str) -> Approval:
        """The approval ``approval_id``, still waiting for a decision; else
        :class:`DecisionRefused` says why not."""
        approval = self._records.get(approval_id)
        if approval is None:
            raise DecisionRefused(
                APPROVAL_NOT_FOUND, f"agent {self.agent_name!r} has no approval {approval_id!r}"
            )
        if approval.status == "pending" and approval.expires_at_unix <= self._clock():
            raise DecisionRefused(
                APPROVAL_ALREADY_DECIDED, f"approval {approval_id!r} expired; the call did not run"
            )
        if approval.status != "pending":
            raise DecisionRefused(
                APPROVAL_ALREADY_DECIDED, f"approval {approval_id!r} is {approval.status} already"
            )
        return approval

    def _check_arguments(self, approval: Approval, arguments: JsonObject) -> None:
        """Refuse edited ``arguments`` that fail the tool's JSON Schema."""
        tool = self._registry.get(approval.tool_name) if self._registry is not None else None
        issues = tool.validator.validate(arguments) if tool is not None else []
        if issues:
            raise DecisionRefused(
                APPROVAL_INVALID_ARGUMENTS,
                f"the arguments do not fit {approval.tool_name!r}: {format_issues(issues)}",
            )

    def suspend_all(self) -> None:
        """The agent stops: every parked Turn ends now (its call stays parked on disk)."""
        self._suspended = True
        for approval_id, waiter in list(self._waiters.items()):
            if not waiter.done():
                waiter.set_exception(ApprovalSuspended(approval_id))

    def forget_instance(self, instance_key: str) -> None:
        """The instance was deleted with its files."""
        for approval_id in [
            a.approval_id for a in self._records.values() if a.instance_key == instance_key
        ]:
            del self._records[approval_id]

    # -- disk ------------------------------------------------------------------------------------

    def _write(self, approval: Approval) -> None:
        """Write the record (atomically and durably), then its copy in the mirror."""
        data = write_approval(approval)
        if self._mirror is not None:
            self._mirror.written(approval.path, data)


ApprovalEventT = TypeVar("ApprovalEventT", bound=ApprovalEvent)


def _event(kind: type[ApprovalEventT], approval: Approval) -> ApprovalEventT:
    """The ``approval.*`` event of ``kind`` about ``approval``, with the fields all share."""
    return kind(
        approval_id=approval.approval_id,
        tool_call_id=approval.tool_call_id,
        tool_name=approval.tool_name,
        turn_id=approval.turn_id,
        status=approval.status,
        expires_at=utc_timestamp(approval.expires_at_unix),
    )
