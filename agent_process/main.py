"""The AgentProcess: one per agent, started by the Orchestrator, serving until told to stop.

Lifecycle: receive the plan → build registry, model and Turn loop (a failure exits with
:data:`EXIT_BOOT_FAILURE` after reporting ``boot_failed``) → report ``ready`` → serve
``delegate`` / ``send`` events on per-instance queues → on ``shutdown``, finish running Turns
within the grace period, acknowledge, exit 0. When the pipe to the Orchestrator closes (the
Orchestrator died), the process exits by itself: no orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

import structlog

from agent_process.approvals import ApprovalGate, DecisionRefused
from agent_process.boot import BootError, build_executor, build_model, build_registry
from agent_process.conversation import ConversationStorageError
from agent_process.extensions import ExtensionHost, ExtensionLoadError
from agent_process.governor import ModelGovernor
from agent_process.instances import InstanceKeyConflict, InstanceManager, InstanceQueueFull
from agent_process.models.base import TokenUsage
from agent_process.pending import LOST_CODE, PendingLedger, lost_handles
from agent_process.runtime import Correlations, IpcAgentRuntime, OrchestratorLink
from agent_process.scope import TextSink
from agent_process.spawn import check_recorded_workdir, spawn_workdir
from agent_process.step import StepSettings, new_message_id
from agent_process.storage import InstanceStorage, open_storage
from agent_process.tools.executor import PendingCompletion, PendingStart, ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.turn import TurnInput, TurnResult, TurnRunner
from bundle.plan import AgentPlan
from goondan.defaults import MAX_INBOX_PER_INSTANCE
from goondan.proctitle import name_process
from goondan.time import utc_timestamp
from ipc import (
    Channel,
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    FrameTooLarge,
    IpcError,
    IpcMessage,
    PeerGone,
    ShutdownMessage,
    ShuttingDown,
    TurnFailed,
)
from ipc import protocol as wire
from ipc.codec import Unencodable
from ipc.delegation import DelegateAnswer, Handoff, ShutdownRequest
from ipc.events import (
    BootFailed,
    Cancel,
    LeaderChanged,
    Ready,
    RestartRequest,
    RuntimeEventReport,
    Send,
    SendDone,
    SendFailed,
    SendRefused,
    SendStarted,
    ShutdownAck,
    StatusChanged,
    TextDelta,
    TurnCompleted,
    read_event,
)
from ipc.logs import configure_logging, log_writer
from ipc.payload import EventBody
from ipc.protocol import (
    EXIT_BOOT_FAILURE,
    EXIT_BROKEN_FDS,
    EXIT_MEMORY_LIMIT,
    EXTERNAL_CALLER,
    ORCHESTRATOR,
    EventKind,
)
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
from ipc.scope import SCOPE_ENV, kill_scope, new_scope
from tools_base import AgentInfo, Message, MessageSource, sandbox


def standard_fd_identities() -> tuple[tuple[int, int] | None, ...]:
    """``(device, inode)`` of fds 0, 1 and 2 (``None`` for a closed one)."""
    identities: list[tuple[int, int] | None] = []
    for fd in (0, 1, 2):
        try:
            stat = os.fstat(fd)
        except OSError:
            identities.append(None)
        else:
            identities.append((stat.st_dev, stat.st_ino))
    return tuple(identities)


_sigterm_before_loop = False
"""A SIGTERM arrived before the event loop took the signal over (see :func:`serve`)."""


def _remember_sigterm(signum: int, frame: object) -> None:
    global _sigterm_before_loop
    _sigterm_before_loop = True


def serve(conn: Connection, plan_data: AgentPlan | dict[str, Any]) -> None:
    """Process entry point (the target the Orchestrator starts): ``plan_data`` is the plan,
    validated already (the supervisor's), or its JSON form, validated here."""
    # Our own signal dispositions first, whatever the fork server left us. Ctrl-C and
    # `systemctl stop` signal the daemon's whole process group: SIGINT is the Orchestrator's
    # to act on (it drains us), and SIGTERM starts our own drain once the loop runs (until
    # then it is only remembered, so it is neither lost nor fatal).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _remember_sigterm)
    plan = plan_data if isinstance(plan_data, AgentPlan) else AgentPlan.model_validate(plan_data)
    name_process("agent", plan.agent_name)
    # Conversations, metadata and workspace files are the daemon user's alone (0600/0700).
    os.umask(0o077)
    _no_inherited_fds()
    # Every program a tool starts carries this token, so none outlives the agent.
    os.environ[SCOPE_ENV] = new_scope()
    if plan.memory_limit_mib is not None:
        _limit_memory(plan.memory_limit_mib)
    sandbox.configure(plan.sandbox)
    configure_logging(process=f"agent:{plan.agent_name}")
    try:
        import uvloop

        code = uvloop.run(_main(conn, plan))
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        code = asyncio.run(_main(conn, plan))
    except MemoryError:  # past Agent.spec.limits.memoryMiB outside any tool: a clean crash
        structlog.get_logger("goondan.agent").error(
            "memory limit reached", agent=plan.agent_name, limit_mib=plan.memory_limit_mib
        )
        code = EXIT_MEMORY_LIMIT
    sys.stdout.flush()
    log_writer().drain()
    os._exit(code)  # skip interpreter teardown: nothing is left to flush


def _source_kind(sender: str) -> Literal["user", "agent", "connector"]:
    """Who a Turn's input came from, by the sender of its delegate or send."""
    if sender in (ORCHESTRATOR, EXTERNAL_CALLER):
        return "user"
    if sender.startswith(wire.CONNECTION_SENDER_PREFIX):
        return "connector"
    return "agent"


MAX_CONNECTION_ANSWER_CHARS = 256 * 1024
"""The longest answer handed back to a Connection's connector (longer ones are cut)."""


def _send_done(sender: str, send_id: str, result: TurnResult) -> SendDone:
    """The end of send ``send_id``'s Turn; a Connection's send also gets the answer, so its
    connector can reply where the event came from (other senders never read it)."""
    if not sender.startswith(wire.CONNECTION_SENDER_PREFIX):
        return SendDone(send_id)
    if result.error is not None:
        return SendDone(send_id, turn_error=f"{result.error.code}: {result.error.message}")
    return SendDone(send_id, answer=result.text[:MAX_CONNECTION_ANSWER_CHARS])


def _limit_memory(mib: int) -> None:
    """Cap the process's data (heap, anonymous mappings, thread stacks) at ``mib`` MiB.

    Tool threads get 1 MiB stacks under a limit, so the 64 of them fit in it; an allocation
    past the limit raises ``MemoryError`` where it happens instead of growing until the host
    runs out.
    """
    threading.stack_size(1024 * 1024)
    limit = mib * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _no_inherited_fds() -> None:
    """Descriptors this process was born with (the fork server's and the resource tracker's
    pipes among them) close on ``exec``: no program a tool starts may hold or write them."""
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)


async def _main(conn: Connection, plan: AgentPlan) -> int:
    process = AgentProcess(plan)
    # Messages are dispatched straight from the channel: no queue, no task switch per message.
    process.channel = await Channel.open(
        conn, ORCHESTRATOR, on_message=process.on_message, on_close=process.on_pipe_closed
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, process.on_sigterm)
    if _sigterm_before_loop:
        loop.call_soon(process.on_sigterm)  # runs once boot() has built the instances
    return await process.run()


class AgentProcess:
    """Everything one AgentProcess runs."""

    channel: Channel
    """Set once the pipe is open (see :func:`_main`)."""

    def __init__(self, plan: AgentPlan) -> None:
        self.plan = plan
        self.name = plan.agent_name
        self._finished = asyncio.Event()
        self.correlations = Correlations()
        self.inboxes: dict[str, list[Message]] = {}
        self.pending = PendingLedger()
        self._exit_code = 0
        self._standard_fds = standard_fd_identities()
        self.draining = False
        self._drain_deadline: float | None = None
        """Loop time at which the grace period of the current drain ends."""
        self.log = structlog.get_logger("goondan.agent").bind(agent=self.name, pid=os.getpid())
        self._tasks: set[asyncio.Task[Any]] = set()
        self.instances: InstanceManager | None = None
        self.turns: TurnRunner | None = None
        self._handlers = self.event_handlers
        self._link = OrchestratorLink(
            agent_name=self.name,
            swarm_name=plan.swarm_name,
            entry_agent=plan.entry_agent,
            agents=plan.agents,
            default_timeout_ms=int(plan.request_timeout_seconds * 1000),
            send=self._send,
            correlations=self.correlations,
            on_async_result=self._on_async_result,
            pending_status=self.pending.status,
        )
        self.governor = ModelGovernor(plan, self._link)
        self.executor: ToolExecutor | None = None
        self.extensions: ExtensionHost | None = None
        self.approvals: ApprovalGate | None = None
        self.storage: InstanceStorage | None = None

    # -- boot ------------------------------------------------------------------------------

    def boot(self) -> None:
        """Build registry, model, executor, Turn runner and instance manager from the plan."""
        plan = self.plan
        storage = self.storage = open_storage(plan)
        self.pending.mirror = storage.records
        registry = build_registry(plan.tools, plan.registry_tools)
        pipeline = MiddlewarePipeline()
        self.extensions = ExtensionHost(
            agent=AgentInfo(
                name=self.name,
                swarm_name=plan.swarm_name,
                system_prompt=plan.system_prompt,
                tools=tuple(plan.catalog_tools),
                required_tools=tuple(plan.required_tools),
                agents=tuple(plan.agents),
            ),
            pipeline=pipeline,
            registry=registry,
            logger=self.log,
        )
        self.executor = build_executor(
            plan, registry, pipeline, self._on_pending_complete, self._on_pending_start
        )
        self.approvals = ApprovalGate(
            self.name,
            Path(plan.state_dir) / "agents" / self.name / "instances",
            tools=frozenset(plan.approval_tools),
            timeout_seconds=plan.approval_timeout_seconds,
            registry=registry,
            allow_registry_calls=plan.allow_registry_calls,
            mirror=storage.records,
        )
        settings = StepSettings(
            agent_name=self.name,
            model=build_model(plan.model, self.name),
            registry=registry,
            executor=self.executor,
            pipeline=pipeline,
            config_tool_names=tuple(plan.catalog_tools),
            system_prompt=plan.system_prompt,
            temperature=plan.temperature,
            max_tokens=plan.max_tokens,
            max_tool_calls_per_step=plan.max_tool_calls_per_step,
            parallel_tool_calls=plan.parallel_tool_calls,
            approvals=self.approvals,
            governor=self.governor,
            before_tool_call=self.channel.write_now,
        )
        runner = self.turns = TurnRunner(
            settings,
            max_steps=plan.max_steps_per_turn,
            on_max_steps=plan.on_max_steps,
            runtime_factory=self._runtime_for,
            inbox=self._drain_inbox,
            events=self._report_event,
            logger=self.log,
            text_sinks=self._text_sink,
        )
        self.instances = InstanceManager(
            self.name,
            Path(plan.state_dir),
            runner,
            on_busy_change=self._report_busy,
            check_workdir=functools.partial(check_recorded_workdir, plan),
            storage=storage,
        )
        self.governor.on_instance_usage = self.instances.usage_changed
        self.governor.flush = self.channel.write_now
        self._close_lost_handles()

    def _close_lost_handles(self) -> None:
        """Answer the background calls an earlier process of this agent never finished, so no
        conversation keeps a call open forever (they are seen by the model's next Turn)."""
        assert self.instances is not None
        for ledger, lost in lost_handles(self.instances.root):
            try:
                store = self.instances.get(lost.instance_key).store
                store.append(_inbox_message(lost.completion(), "tool_completion"))
                ledger.unlink(missing_ok=True)
                if self.pending.mirror is not None:
                    self.pending.mirror.removed(ledger)
            except Exception as exc:  # that instance cannot load now; try again next boot
                self.log.warning(
                    "lost background call not closed",
                    instance_key=lost.instance_key,
                    handle=lost.handle,
                    error=str(exc),
                )
                continue
            self.log.warning(
                "background call lost in a restart",
                instance_key=lost.instance_key,
                handle=lost.handle,
                tool=lost.tool_name,
                code=LOST_CODE,
            )

    def _resume_parked_turns(self) -> None:
        """Take up the Turns an earlier process of this agent left parked on an approval: one
        resuming Turn per instance, first in its queue, so the instance waits for the decision
        (or the deadline on disk) exactly as the cut Turn did."""
        assert self.approvals is not None
        assert self.instances is not None
        for key in self.approvals.load():
            try:
                messages = self.instances.get(key).store.messages
            except Exception as exc:  # the instance cannot load now; the next start tries again
                self.log.error("parked Turn not resumed", instance_key=key, error=str(exc))
                continue
            # A record whose result reached the conversation (the process died before it
            # marked it settled) has nothing left to resume.
            answered = {m.source.tool_call_id for m in messages if m.role == "tool"}
            for approval in self.approvals.unsettled(key):
                if approval.tool_call_id in answered:
                    self.approvals.settle(approval)
            parked = self.approvals.unsettled(key)
            if not parked:
                continue
            trace_id = parked[0].trace_id or wire.new_trace_id()
            log = self.log.bind(instance_key=key, trace_id=trace_id)
            log.info(
                "resuming a Turn parked for approval", approvals=[a.approval_id for a in parked]
            )
            turn_input = TurnInput(
                text="",
                trace_id=trace_id,
                event_type="approval.resume",
                source_kind="user",
                source_name=ORCHESTRATOR,
                resume=True,
            )
            try:
                future = self.instances.submit(key, turn_input)
            except Exception as exc:  # the instance cannot load now; the next start tries again
                log.error("parked Turn not resumed", error=str(exc))
                continue

            def finished(done: asyncio.Future[TurnResult], key: str = key) -> None:
                if done.cancelled():
                    return
                result = done.result()
                # Nobody waits for this answer: it is in the conversation and the event log.
                self.log.info(
                    "resumed turn answered",
                    instance_key=key,
                    trace_id=result.trace_id,
                    status=result.status,
                )
                self._tell(TurnCompleted(key, result.status))
                self._check_standard_fds()

            future.add_done_callback(finished)

    def _decide_approval(self, message: EventMessage, body: ApprovalDecision) -> None:
        """An operator's decision on a parked call: recorded, the Turn woken, answered."""
        assert self.approvals is not None
        answer: ApprovalDecisionResult
        try:
            approval = self.approvals.decide(
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
        self._tell(answer, message.correlation_id)

    def _runtime_for(self, instance_key: str, turn_input: TurnInput) -> IpcAgentRuntime:
        return IpcAgentRuntime(self._link, instance_key, turn_input)

    # -- serving ---------------------------------------------------------------------------

    async def run(self) -> int:
        """Boot, report ready, serve until shutdown or until the Orchestrator is gone."""
        try:
            self.boot()
            assert self.extensions is not None
            await self.extensions.load(self.plan.extensions)
        except (BootError, ExtensionLoadError) as exc:
            self.log.error("agent failed to boot", error=str(exc))
            if self.extensions is not None:
                await self.extensions.aclose()
            self._tell(BootFailed(str(exc)))
            await self.channel.flush()
            return EXIT_BOOT_FAILURE
        try:
            self._send(self._event(Ready(os.getpid(), os.environ.get(SCOPE_ENV))))
        except Exception:  # the Orchestrator left while we booted: nobody to serve
            self.log.info("orchestrator gone before the agent was ready; exiting")
            await self._stop()
            return 0
        # At debug: the daemon logs each agent's readiness, and an idle agent that logs
        # nothing never starts its log writer thread.
        self.log.debug("agent ready")
        self._resume_parked_turns()
        await self._finished.wait()
        await self._stop()
        return self._exit_code

    def _check_standard_fds(self) -> None:
        """After each Turn: a tool that closed or replaced stdin, stdout or stderr leaves the
        process half-broken (logs lost, or written into whatever file took the number), so
        the agent exits to be restarted clean rather than serve on like that."""
        now = standard_fd_identities()
        if now == self._standard_fds:
            return
        broken = [fd for fd in (0, 1, 2) if now[fd] != self._standard_fds[fd]]
        self._report_event(
            {
                "type": "process.broken_fds",
                "timestamp": utc_timestamp(),
                "agentName": self.name,
                "fds": broken,
            }
        )
        self._exit_code = EXIT_BROKEN_FDS
        if not self.draining:  # let the other conversations' running Turns finish first
            self._begin_shutdown(self._own_shutdown("broken_fds"))

    def on_message(self, message: IpcMessage) -> None:
        """Dispatch one message from the Orchestrator (called by the channel)."""
        try:
            self._dispatch(message)
        except Exception as exc:  # a bug in dispatch must not kill the agent, nor hang a caller
            self.log.exception("failed to handle message", type=message.type)
            error = IpcError(f"the agent could not take the request: {exc!r}", code="E_INTERNAL")
            if isinstance(message, DelegateMessage):
                self._refuse(message.sender, message.correlation_id, error)

    def on_sigterm(self) -> None:
        """SIGTERM (``systemctl stop`` signals every process of the group): drain like a
        ``shutdown`` from the Orchestrator, then exit 0.

        While draining, a SIGTERM within the grace period changes nothing (the group's signal
        during a restart's drain must not cut the Turn short); one after it (the supervisor's
        escalation) ends the process at once, by the signal's default action.
        """
        if self.draining:
            loop = asyncio.get_running_loop()
            if self._drain_deadline is not None and loop.time() < self._drain_deadline:
                self.log.info("SIGTERM while draining; the drain goes on")
                return
            self.log.warning("SIGTERM after the grace period; stopping now")
            log_writer().drain(0.5)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if self.instances is None:  # boot failed: the process is leaving anyway
            return
        self.log.info("SIGTERM; draining")
        self._begin_shutdown(self._own_shutdown("sigterm"))

    def on_pipe_closed(self) -> None:
        """The Orchestrator is gone: stop, so no agent outlives it."""
        if not self._finished.is_set():
            self.log.warning("orchestrator is gone; exiting")
            self._finished.set()

    # -- the dispatch table ------------------------------------------------------------------

    @property
    def event_handlers(self) -> dict[EventKind, Callable[[EventMessage, Any], None]]:
        """What each event kind from the Orchestrator does."""
        return {
            EventKind.SEND: self._on_send,
            EventKind.SEND_FAILED: self._on_send_failed,
            EventKind.SPAWN_RESULT: self._on_answer,
            EventKind.LIST_RESULT: self._on_answer,
            EventKind.CONFIG_CHECK_RESULT: self._on_answer,
            EventKind.MODEL_PERMIT_RESULT: self._on_answer,
            EventKind.PREPARE_INSTANCE: self._prepare_instance,
            EventKind.DELETE_INSTANCE: self._delete_instance,
            EventKind.RESTART_INSTANCE: self._restart_instance,
            EventKind.APPROVAL_DECISION: self._decide_approval,
            EventKind.CANCEL: self._cancel,
            EventKind.LEADER_CHANGED: self._leader_changed,
        }

    def _dispatch(self, message: IpcMessage) -> None:
        if isinstance(message, DelegateMessage):
            self._on_delegate(message)
        elif isinstance(message, DelegateResultMessage):
            if not self.correlations.resolve_answer(message):
                self.log.info(
                    "late or unknown delegate result dropped", correlation_id=message.correlation_id
                )
        elif isinstance(message, EventMessage):
            try:
                body = read_event(message)
            except IpcError as exc:
                self.log.warning("event refused", kind=message.kind, code=exc.code, error=str(exc))
                return
            handler = self._handlers.get(body.KIND)
            if handler is None:
                self.log.debug("ignored event", kind=body.KIND)
                return
            handler(message, body)
        elif isinstance(message, ShutdownMessage) and not self.draining:
            default_ms = int(self.plan.shutdown_grace_seconds * 1000)
            try:
                request = ShutdownRequest.from_wire(message.payload, default_ms)
            except IpcError:
                request = ShutdownRequest(default_ms, "orchestrator")
            self._begin_shutdown(request)

    def _own_shutdown(self, reason: str) -> ShutdownRequest:
        """A drain this process starts by itself, with the plan's grace period."""
        return ShutdownRequest(int(self.plan.shutdown_grace_seconds * 1000), reason)

    def _begin_shutdown(self, request: ShutdownRequest) -> None:
        self.draining = True  # refuse new work from now on
        if self.approvals is not None:
            # A Turn parked on an approval would hold the drain for its whole grace period;
            # it ends now instead and is resumed, still parked, when the agent starts again.
            self.approvals.suspend_all()
        self._drain_deadline = asyncio.get_running_loop().time() + request.grace_seconds
        task = asyncio.ensure_future(self._shutdown(request))
        self._tasks.add(task)
        task.add_done_callback(lambda _: self._finished.set())

    def _on_answer(self, message: EventMessage, body: EventBody) -> None:
        self.correlations.resolve(message.correlation_id, body)

    def _delete_instance(self, message: EventMessage, body: DeleteInstance) -> None:
        """Delete a conversation unless a Turn of it is queued or running; answer either way."""
        assert self.instances is not None
        key = body.instance_key
        answer: DeleteInstanceResult
        try:
            conversation = self.instances.conversation_directory(key)
            deleted = self.instances.delete(key)
        except Exception as exc:  # a key whose directory is another's, say
            answer = DeleteInstanceResult(False, error=str(exc))
        else:
            if deleted is None:
                why = f"instance {key!r} has a Turn queued or running"
                answer = DeleteInstanceResult(False, error=why)
            else:
                answer = DeleteInstanceResult(True, deleted)
                self.inboxes.pop(key, None)
                if self.approvals is not None:
                    self.approvals.forget_instance(key)
                if self.extensions is not None:
                    self.extensions.forget_instance(conversation)
        self._tell(answer, message.correlation_id)

    def _restart_instance(self, message: EventMessage, body: RestartInstance) -> None:
        """Restart one conversation (see :meth:`InstanceManager.restart`); the other instances
        keep running. Answered once it is reloaded."""
        task = asyncio.ensure_future(self._restart(body.instance_key, message.correlation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, key: str, correlation_id: str | None) -> None:
        assert self.instances is not None
        reason = f"instance {key!r} of agent {self.name!r} was restarted by an operator"

        def stopped(turn_input: TurnInput) -> TurnResult:
            return TurnResult.cancelled(turn_input, reason, steps=0, usage=TokenUsage())

        answer: RestartInstanceResult
        try:
            conversation = self.instances.conversation_directory(key)
            # Within the Orchestrator's patience for an answer, so it never times out first.
            loaded, count = await self.instances.restart(key, stopped, wait_seconds=5.0)
        except Exception as exc:  # the Turn would not stop, the conversation is unreadable
            answer = RestartInstanceResult(False, error=str(exc) or type(exc).__name__)
        else:
            if loaded and self.extensions is not None:
                self.extensions.forget_instance(conversation)  # read again from disk too
            self.log.info(
                "instance restarted", instance_key=key, loaded=loaded, stopped_turns=count
            )
            answer = RestartInstanceResult(True, loaded, count)
        self._tell(answer, correlation_id)

    def _cancel(self, message: EventMessage, body: Cancel) -> None:
        """Stop the Turns of a cancelled trace at their next safe point (queued ones too)."""
        if self.turns is not None:
            running = self.turns.cancel(body.trace_id, body.reason)
            self.log.info("trace cancelled", trace_id=body.trace_id, running_turns=running)

    def _leader_changed(self, message: EventMessage, body: LeaderChanged) -> None:
        """What the previous leader owed this agent will never come: answer it ourselves."""
        waiting = len(self.correlations)
        self.correlations.fail_all(
            IpcError(
                "the cluster's leader went away before answering; a standby leads now "
                "(whether the request ran is not known)",
                code="LEADER_LOST",
            )
        )
        self.log.warning("taken over by a new leader", leader=body.leader, answers_lost=waiting)

    # -- Turns -------------------------------------------------------------------------------

    def _on_delegate(self, message: DelegateMessage) -> None:
        try:
            handoff = Handoff.from_wire(message.payload)
        except IpcError as exc:
            self._refuse(message.sender, message.correlation_id, exc)
            return
        self._start_turn(message.sender, handoff, message.correlation_id)

    def _on_send(self, message: EventMessage, body: Send) -> None:
        self._start_turn(body.handoff.source or message.sender, body.handoff, None)

    def _start_turn(self, sender: str, handoff: Handoff, correlation_id: str | None) -> None:
        """Queue the Turn of a request (answered when it ends) or of a send (reported started
        and done, so the Orchestrator can redeliver one lost before it started)."""
        assert self.instances is not None
        send_id = handoff.event_id if correlation_id is None else ""
        if self.draining:
            refusal = ShuttingDown(f"agent {self.name!r} is shutting down")
            self._refuse(sender, correlation_id, refusal, send_id)
            return
        instance_key = handoff.instance_key
        on_start = None
        if send_id:

            def on_start() -> None:
                # Out now, before the Turn can have any effect: a send whose Turn never
                # started is delivered again, one that started never is.
                self._tell(SendStarted(send_id))
                self.channel.write_now()

        try:
            future = self.instances.submit(
                instance_key, self._turn_input(sender, handoff), on_start=on_start
            )
        except Exception as exc:  # a full queue, an unreadable conversation, a full disk, ...
            code = getattr(exc, "code", None)
            if not isinstance(exc, InstanceQueueFull | InstanceKeyConflict):
                self.log.error(
                    "instance unavailable", instance_key=instance_key, code=code, error=str(exc)
                )
            error = IpcError(
                str(exc) or type(exc).__name__,
                code=code if isinstance(code, str) else "E_INTERNAL",
            )
            self._refuse(sender, correlation_id, error, send_id)
            return

        def finished(done: asyncio.Future[TurnResult]) -> None:
            if done.cancelled():  # queued or running when the agent stopped
                stopped = ShuttingDown(
                    f"agent {self.name!r} stopped before the Turn finished "
                    "(the shutdown grace period ended first)"
                )
                self._refuse(sender, correlation_id, stopped)
                return
            self._turn_finished(sender, instance_key, correlation_id, send_id, done.result())

        future.add_done_callback(finished)

    @staticmethod
    def _turn_input(sender: str, handoff: Handoff) -> TurnInput:
        return TurnInput(
            text=handoff.input,
            trace_id=handoff.trace_id or wire.new_trace_id(),
            event_type=handoff.event_type,
            source_kind=_source_kind(sender),
            source_name=sender,
            metadata=handoff.metadata,
            call_chain=handoff.call_chain,
            parent_span_id=handoff.parent_span_id,
            stream_id=handoff.stream_id,
            relay=handoff.relay,
        )

    def _turn_finished(
        self,
        sender: str,
        instance_key: str,
        correlation_id: str | None,
        send_id: str,
        result: TurnResult,
    ) -> None:
        self._tell(TurnCompleted(instance_key, result.status))
        if correlation_id is not None:
            self._reply(sender, correlation_id, result)
        elif send_id:
            self._tell(_send_done(sender, send_id, result))
        if result.restart_reason is not None:
            # After the answer is out: the restart must not cost the caller its result.
            self.log.info("restart requested by a tool", reason=result.restart_reason)
            self._tell(RestartRequest(result.restart_reason))
        self._check_standard_fds()

    def _reply(self, sender: str, correlation_id: str, result: TurnResult) -> None:
        error = None
        if result.error is not None:
            # The Turn's own code (E_MAX_STEPS, a model error, ...) is the code the caller sees.
            error = TurnFailed(
                result.error.message,
                details={"turnCode": result.error.code},
                code=result.error.code,
            )
        answer = DelegateAnswer(result.status, result.text, result.to_json(), error)
        try:
            self.channel.send_nowait(
                wire.delegate_result(self.name, sender, correlation_id, answer)
            )
        except FrameTooLarge as exc:
            # The caller still gets its one answer: an error instead of the oversize result.
            self.log.warning("answer too large for one frame", error=str(exc))
            too_large = IpcError(
                f"the answer of {self.name!r} is too large to send ({exc})",
                code="E_RESULT_TOO_LARGE",
            )
            self._refuse(sender, correlation_id, too_large)
        except Unencodable as exc:
            # A lone surrogate a model wrote, say: the caller still gets its one answer.
            self.log.warning("answer cannot be encoded", error=str(exc))
            unencodable = IpcError(
                f"the answer of {self.name!r} cannot be sent: {exc}",
                code="IPC_MALFORMED_PAYLOAD",
            )
            self._refuse(sender, correlation_id, unencodable)
        except Exception as exc:  # the Orchestrator is gone: nothing to tell
            self.log.debug("answer not sent", error=str(exc))

    def _refuse(
        self, sender: str, correlation_id: str | None, error: IpcError, send_id: str = ""
    ) -> None:
        """Answer a request (or report a send) that gets no Turn, with why."""
        if correlation_id is None:
            self.log.warning("event refused", error=error.message, code=error.code)
            if send_id:
                self._tell(SendRefused(send_id, error))
            return
        self._send_quietly(
            wire.delegate_result(self.name, sender, correlation_id, DelegateAnswer.failure(error))
        )

    def _prepare_instance(self, message: EventMessage, body: PrepareInstance) -> None:
        """``agents__spawn``: create the instance (in its own workdir if asked, which must lie
        in the asking instance's workspace: :mod:`agent_process.spawn` says why the check is
        here) unless it exists, whoever asks; answer with the instance or why not."""
        assert self.instances is not None
        key = body.instance_key
        answer: PrepareInstanceResult
        try:
            workdir = spawn_workdir(body.cwd, self.plan, body.owner, body.owner_instance_key)
            spawned_by = {
                "agent": body.owner,
                "instanceKey": body.owner_instance_key,
                "at": utc_timestamp(),
            }
            instance, created = self.instances.prepare(key, workdir=workdir, spawned_by=spawned_by)
            answer = PrepareInstanceResult(key, created, str(instance.workdir))
        except Exception as exc:
            code = getattr(exc, "code", None)
            error = IpcError(str(exc), code=code if isinstance(code, str) else "E_INTERNAL")
            answer = PrepareInstanceResult(error=error)
        self._tell(answer, message.correlation_id)

    async def _shutdown(self, request: ShutdownRequest) -> None:
        """Stop taking work, let running Turns finish within the grace period, acknowledge."""
        assert self.instances is not None
        self.draining = True
        grace = request.grace_seconds
        self.log.info("draining", grace_seconds=grace, reason=request.reason)
        try:
            async with asyncio.timeout(grace):
                await self.instances.drain()
        except TimeoutError:
            self.log.warning("turns still running at the end of the grace period")
        self._tell(ShutdownAck())
        await self.channel.flush()

    async def _stop(self) -> None:
        self.correlations.fail_all(ShuttingDown("the agent process is stopping"))
        if self.instances is not None:
            await self.instances.close()
        if self.storage is not None:
            self.storage.close()
        if self.executor is not None:
            await self.executor.aclose()
        if self.extensions is not None:
            await self.extensions.aclose()
        killed = kill_scope(os.environ.get(SCOPE_ENV))
        if killed:
            self.log.info("tool programs ended with the agent", pids=killed)
        await self.channel.flush()  # the answers of the Turns cut short above go out first
        self.channel.close()

    # -- reporting -----------------------------------------------------------------------

    def _report_event(self, runtime_event: dict[str, Any]) -> None:
        self._tell(RuntimeEventReport(runtime_event))

    def _text_sink(self, instance_key: str, turn_id: str, turn_input: TurnInput) -> TextSink:
        """Where a streamed Turn's model text goes: a ``text_delta`` event per piece, queued
        on the pipe without waiting (the Orchestrator reads it at once whatever its clients
        do; a slow client costs them, not this agent)."""
        stream_id, trace_id = turn_input.stream_id, turn_input.trace_id

        def sink(step_id: str, text: str) -> None:
            self._tell(TextDelta(stream_id, text, trace_id, instance_key, turn_id, step_id))

        return sink

    def _report_busy(self, busy: bool) -> None:
        self._tell(StatusChanged("processing" if busy else "idle"))

    def _event(self, body: EventBody, correlation_id: str | None = None) -> EventMessage:
        return wire.event(self.name, ORCHESTRATOR, body, correlation_id)

    def _tell(self, body: EventBody, correlation_id: str | None = None) -> None:
        """Send the Orchestrator an event; nothing happens if it is gone."""
        self._send_quietly(self._event(body, correlation_id))

    def _send(self, message: IpcMessage) -> None:
        self.channel.send_nowait(message)

    def _send_quietly(self, message: IpcMessage) -> None:
        try:
            self.channel.send_nowait(message)
        except (PeerGone, Exception) as exc:  # the Orchestrator is gone: nothing to tell
            self.log.debug("message not sent", error=str(exc), type=message.type)

    # -- inbox -----------------------------------------------------------------------------

    def _drain_inbox(self, instance_key: str) -> list[Message]:
        return self.inboxes.pop(instance_key, [])

    def _on_async_result(self, instance_key: str, message: Message) -> None:
        self._enqueue(instance_key, message, "inter_agent_response", wake=True)

    def _on_send_failed(self, message: EventMessage, body: SendFailed) -> None:
        """A send of ours was lost (its target crashed mid-Turn, or refused it): tell the
        instance that sent it, in its next Step."""
        self.log.warning(
            "send not delivered",
            instance_key=body.instance_key,
            target=body.target,
            event_id=body.event_id,
        )
        report = {"type": "send_failed", "eventId": body.event_id, "target": body.target}
        self._deliver(body.instance_key, {**report, "error": body.error.to_dict()}, "send_failed")

    def _on_pending_start(self, start: PendingStart) -> None:
        assert self.instances is not None
        directory = self.instances.get(start.instance_key).directory
        self.pending.started(
            start.instance_key, directory, start.handle, start.tool_call_id, start.tool_name
        )

    def _on_pending_complete(self, completion: PendingCompletion) -> None:
        payload = {
            "type": "tool_completion",
            "handle": completion.handle,
            **completion.result.to_json(),
        }
        self.pending.finished(completion.instance_key, completion.handle, payload)
        self._deliver(completion.instance_key, payload, "tool_completion", wake=True)

    def _deliver(
        self, instance_key: str, payload: dict[str, Any], kind: str, *, wake: bool = False
    ) -> None:
        """Put a message in the instance's inbox: the next Step of a running Turn takes it.

        With ``wake``, an idle instance starts a Turn for it at once, so a result the model
        waits for is seen without anyone sending anything.
        """
        self._enqueue(instance_key, _inbox_message(payload, kind), kind, wake=wake)

    def _enqueue(self, instance_key: str, message: Message, kind: str, *, wake: bool) -> None:
        inbox = self.inboxes.setdefault(instance_key, [])
        if len(inbox) >= MAX_INBOX_PER_INSTANCE:
            self.log.error(
                "inbox full; message dropped",
                code="E_INBOX_FULL",
                instance_key=instance_key,
                kind=kind,
                limit=MAX_INBOX_PER_INSTANCE,
            )
            self._report_event(
                {
                    "type": "inbox.overflow",
                    "timestamp": utc_timestamp(),
                    "agentName": self.name,
                    "instanceKey": instance_key,
                    "kind": kind,
                    "code": "E_INBOX_FULL",
                }
            )
            return
        inbox.append(message)
        if wake:
            self._wake(instance_key)

    def _wake(self, instance_key: str) -> None:
        """Start a Turn for what waits in an idle instance's inbox (one Turn takes it all)."""
        inbox = self.inboxes.get(instance_key)
        if not inbox or self.instances is None or self.draining:
            return
        if not self.instances.is_idle(instance_key):
            return  # the running or queued Turn takes it at its next Step
        first = inbox.pop(0)
        kind = first.metadata.get("__goondanInbox")
        turn_input = TurnInput(
            text=first.content,
            event_type=f"inbox.{kind}",
            source_kind="agent",
            source_name=self.name,
            metadata={"__goondanInbox": kind},
            message_metadata=first.metadata,
        )
        try:
            future = self.instances.submit(instance_key, turn_input)
        except Exception as exc:
            inbox.insert(0, first)
            self.log.warning("inbox not delivered", instance_key=instance_key, error=str(exc))
            return

        def done(finished: asyncio.Future[TurnResult]) -> None:
            if not finished.cancelled():
                self._wake(instance_key)  # more may have arrived meanwhile

        future.add_done_callback(done)


def _inbox_message(payload: dict[str, Any], kind: str) -> Message:
    return Message(
        id=new_message_id("inbox"),
        role="user",
        content=json.dumps(payload, ensure_ascii=False),
        created_at=utc_timestamp(),
        source=MessageSource(type="system"),
        metadata={"__goondanInbox": kind},
    )
