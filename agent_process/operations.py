"""What the Orchestrator asks of an agent's instances besides Turns: prepare one for
``agents__spawn``, delete or restart one, cancel a trace's Turns, record an operator's decision
on a parked call; and, at start, take up the Turns an earlier process left parked.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from agent_process.approvals import ApprovalGate, DecisionRefused
from agent_process.conversation import ConversationStorageError
from agent_process.extensions import ExtensionHost
from agent_process.inbox import Inboxes
from agent_process.instances import InstanceManager
from agent_process.models.base import TokenUsage
from agent_process.outbox import Outbox
from agent_process.shutdown import Shutdown
from agent_process.spawn import spawn_workdir
from agent_process.turn import TurnRunner
from agent_process.turn_types import TurnInput, TurnResult
from bundle.plan import AgentPlan
from goondan.errors import DeliveryCode
from goondan.state_files.approvals import Approval
from goondan.time import utc_timestamp
from ipc import EventMessage, IpcError
from ipc import protocol as wire
from ipc.events import Cancel, TurnCompleted
from ipc.protocol import ORCHESTRATOR
from ipc.questions import (
    ApprovalDecision,
    ApprovalDecisionResult,
    DeleteInstance,
    DeleteInstanceResult,
    PrepareInstance,
    PrepareInstanceResult,
    RestartInstance,
    RestartInstanceResult,
)
from ipc.runtime_events import EventType


class InstanceOperations:
    """Operator and tool requests on the instances of one agent, each answered."""

    _instances: InstanceManager
    _turns: TurnRunner
    _approvals: ApprovalGate
    _extensions: ExtensionHost

    def __init__(
        self, plan: AgentPlan, inboxes: Inboxes, outbox: Outbox, shutdown: Shutdown, log: Any
    ) -> None:
        self.plan = plan
        self.agent_name = plan.agent_name
        self._inboxes = inboxes
        self._outbox = outbox
        self._shutdown = shutdown
        self._log = log
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(
        self,
        *,
        instances: InstanceManager,
        turns: TurnRunner,
        approvals: ApprovalGate,
        extensions: ExtensionHost,
    ) -> None:
        """Take the parts the agent built at boot; no operation is served before."""
        self._instances = instances
        self._turns = turns
        self._approvals = approvals
        self._extensions = extensions

    def prepare(self, message: EventMessage, body: PrepareInstance) -> None:
        """``agents__spawn``: create the instance (in its own workdir if asked, which must lie
        in the asking instance's workspace: :mod:`agent_process.spawn` says why the check is
        here) unless it exists, whoever asks; answer with the instance or why not."""
        key = body.instance_key
        answer: PrepareInstanceResult
        try:
            workdir = spawn_workdir(body.cwd, self.plan, body.owner, body.owner_instance_key)
            spawned_by = {
                "agent": body.owner,
                "instanceKey": body.owner_instance_key,
                "at": utc_timestamp(),
            }
            instance, created = self._instances.prepare(key, workdir=workdir, spawned_by=spawned_by)
            answer = PrepareInstanceResult(key, created, str(instance.workdir))
        except Exception as exc:
            code = getattr(exc, "code", None)
            error = IpcError(
                str(exc), code=code if isinstance(code, str) else DeliveryCode.E_INTERNAL
            )
            answer = PrepareInstanceResult(error=error)
        self._outbox.tell(answer, message.correlation_id)

    def delete(self, message: EventMessage, body: DeleteInstance) -> None:
        """Delete a conversation unless a Turn of it is queued or running; answer either way."""
        key = body.instance_key
        answer: DeleteInstanceResult
        try:
            conversation = self._instances.conversation_directory(key)
            deleted = self._instances.delete(key)
        except Exception as exc:  # a key whose directory is another's, say
            answer = DeleteInstanceResult(False, error=str(exc))
        else:
            if deleted is None:
                why = f"instance {key!r} has a Turn queued or running"
                answer = DeleteInstanceResult(False, error=why)
            else:
                answer = DeleteInstanceResult(True, deleted)
                self._inboxes.forget(key)
                self._approvals.forget_instance(key)
                self._extensions.forget_instance(conversation)
        self._outbox.tell(answer, message.correlation_id)

    def restart(self, message: EventMessage, body: RestartInstance) -> None:
        """Restart one conversation (see :meth:`InstanceManager.restart`); the other instances
        keep running. Answered once it is reloaded."""
        task = asyncio.ensure_future(self._restart(body.instance_key, message.correlation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, key: str, correlation_id: str | None) -> None:
        reason = f"instance {key!r} of agent {self.agent_name!r} was restarted by an operator"

        def stopped(turn_input: TurnInput) -> TurnResult:
            return TurnResult.cancelled(turn_input, reason, steps=0, usage=TokenUsage())

        answer: RestartInstanceResult
        try:
            conversation = self._instances.conversation_directory(key)
            # Within the Orchestrator's patience for an answer, so it never times out first.
            loaded, count = await self._instances.restart(key, stopped, wait_seconds=5.0)
        except Exception as exc:  # the Turn would not stop, the conversation is unreadable
            answer = RestartInstanceResult(False, error=str(exc) or type(exc).__name__)
        else:
            if loaded:
                self._extensions.forget_instance(conversation)  # read again from disk too
            self._log.info(
                "instance restarted", instance_key=key, loaded=loaded, stopped_turns=count
            )
            answer = RestartInstanceResult(True, loaded, count)
        self._outbox.tell(answer, correlation_id)

    def cancel(self, message: EventMessage, body: Cancel) -> None:
        """Stop the Turns of a cancelled trace at their next safe point (queued ones too)."""
        running = self._turns.cancel(body.trace_id, body.reason)
        self._log.info("trace cancelled", trace_id=body.trace_id, running_turns=running)

    def decide_approval(self, message: EventMessage, body: ApprovalDecision) -> None:
        """An operator's decision on a parked call: recorded, the Turn woken, answered."""
        answer: ApprovalDecisionResult
        try:
            approval = self._approvals.decide(
                body.approval_id,
                body.decision,
                arguments=body.arguments,
                reason=body.reason,
                decided_by=body.decided_by,
            )
            answer = ApprovalDecisionResult(approval.to_json())
        except DecisionRefused as exc:
            answer = ApprovalDecisionResult(error=IpcError(str(exc), code=exc.code))
        except ConversationStorageError as exc:
            answer = ApprovalDecisionResult(error=IpcError(str(exc), code=exc.code))
        self._outbox.tell(answer, message.correlation_id)

    def resume_parked_turns(self) -> None:
        """Take up the Turns an earlier process of this agent left parked on an approval: one
        resuming Turn per instance, first in its queue, so the instance waits for the decision
        (or the deadline on disk) exactly as the cut Turn did."""
        for key in self._approvals.load():
            parked = self._still_parked(key)
            if parked:
                self._resume(key, parked)

    def _still_parked(self, key: str) -> list[Approval]:
        """The approvals of instance ``key`` a Turn still waits on; those whose result reached
        the conversation (the process died before it marked them settled) are settled now."""
        approvals = self._approvals
        try:
            messages = self._instances.get(key).store.messages
        except Exception as exc:  # the instance cannot load now; the next start tries again
            self._log.error("parked Turn not resumed", instance_key=key, error=str(exc))
            return []
        answered = {m.source.tool_call_id for m in messages if m.role == "tool"}
        for approval in approvals.unsettled(key):
            if approval.tool_call_id in answered:
                approvals.settle(approval)
        return approvals.unsettled(key)

    def _resume(self, key: str, parked: list[Approval]) -> None:
        """Queue the Turn that takes up the ``parked`` calls of instance ``key``."""
        trace_id = parked[0].trace_id or wire.new_trace_id()
        log = self._log.bind(instance_key=key, trace_id=trace_id)
        log.info("resuming a Turn parked for approval", approvals=[a.approval_id for a in parked])
        turn_input = TurnInput(
            text="",
            trace_id=trace_id,
            event_type=EventType.APPROVAL_RESUME.value,
            source_kind="user",
            source_name=ORCHESTRATOR,
            resume=True,
        )
        try:
            future = self._instances.submit(key, turn_input)
        except Exception as exc:  # the instance cannot load now; the next start tries again
            log.error("parked Turn not resumed", error=str(exc))
            return
        future.add_done_callback(functools.partial(self._resumed, key))

    def _resumed(self, key: str, done: asyncio.Future[TurnResult]) -> None:
        if done.cancelled():
            return
        result = done.result()
        # Nobody waits for this answer: it is in the conversation and the event log.
        self._log.info(
            "resumed turn answered",
            instance_key=key,
            trace_id=result.trace_id,
            status=result.status,
        )
        self._outbox.tell(TurnCompleted(key, result.status))
        self._shutdown.check_standard_fds()
