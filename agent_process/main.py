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
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import structlog

from agent_process.approvals import ApprovalGate
from agent_process.boot import BootError, build_executor, build_model, build_registry
from agent_process.extensions import ExtensionHost, ExtensionLoadError
from agent_process.governor import ModelGovernor
from agent_process.inbox import Inboxes
from agent_process.instances import InstanceManager
from agent_process.link import Correlations, OrchestratorLink
from agent_process.operations import InstanceOperations
from agent_process.outbox import Outbox
from agent_process.pending import PendingLedger
from agent_process.runtime import IpcAgentRuntime
from agent_process.shutdown import Shutdown
from agent_process.spawn import check_recorded_workdir
from agent_process.step import StepSettings
from agent_process.storage import InstanceStorage, open_storage
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.turn import TurnInput, TurnRunner
from agent_process.turn_requests import TurnRequests
from bundle.plan import AgentPlan
from goondan.errors import DeliveryCode
from goondan.proctitle import name_process
from ipc import (
    Channel,
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    IpcError,
    IpcMessage,
    ShutdownMessage,
    ShuttingDown,
)
from ipc.events import BootFailed, LeaderChanged, Ready, read_event
from ipc.logs import configure_logging, log_writer
from ipc.payload import EventBody
from ipc.protocol import EXIT_BOOT_FAILURE, EXIT_MEMORY_LIMIT, ORCHESTRATOR, EventKind
from ipc.scope import SCOPE_ENV, kill_scope, new_scope
from tools_base import AgentInfo, sandbox

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
    shutdown = process.shutdown
    # Messages are dispatched straight from the channel: no queue, no task switch per message.
    process.channel = await Channel.open(
        conn, ORCHESTRATOR, on_message=process.on_message, on_close=shutdown.on_pipe_closed
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, shutdown.on_sigterm)
    if _sigterm_before_loop:
        loop.call_soon(shutdown.on_sigterm)  # runs once boot() has built the instances
    return await process.run()


class AgentProcess:
    """One agent's process: boots from the plan, then routes what the Orchestrator sends to
    the part that handles it.

    Its parts: :class:`Outbox` (everything sent to the Orchestrator), :class:`Shutdown`
    (draining and exiting), :class:`TurnRequests` (delegates and sends, each a Turn),
    :class:`Inboxes` (what reaches an instance between Steps) and :class:`InstanceOperations`
    (prepare, delete, restart, cancel, approval decisions).
    """

    def __init__(self, plan: AgentPlan) -> None:
        self.plan = plan
        self.name = plan.agent_name
        self.log = structlog.get_logger("goondan.agent").bind(agent=self.name, pid=os.getpid())
        self.correlations = Correlations()
        self.pending = PendingLedger()
        self.outbox = Outbox(self.name, self.log)
        self.shutdown = Shutdown(self.outbox, plan.shutdown_grace_seconds, self.log)
        self.inbox = Inboxes(self.name, self.pending, self.outbox, self.shutdown, self.log)
        self.requests = TurnRequests(self.name, self.outbox, self.shutdown, self.log)
        self.operations = InstanceOperations(plan, self.inbox, self.outbox, self.shutdown, self.log)
        self.instances: InstanceManager | None = None
        self.turns: TurnRunner | None = None
        self._link = OrchestratorLink(
            agent_name=self.name,
            swarm_name=plan.swarm_name,
            entry_agent=plan.entry_agent,
            agents=plan.agents,
            default_timeout_ms=int(plan.request_timeout_seconds * 1000),
            send=self.outbox.send,
            correlations=self.correlations,
            on_async_result=self.inbox.on_async_result,
            pending_status=self.pending.status,
        )
        self.governor = ModelGovernor(plan, self._link)
        self.executor: ToolExecutor | None = None
        self.extensions: ExtensionHost | None = None
        self.approvals: ApprovalGate | None = None
        self.storage: InstanceStorage | None = None
        self._handlers = self.event_handlers

    @property
    def channel(self) -> Channel:
        """The pipe to the Orchestrator; set once it is open (see :func:`_main`)."""
        return self.outbox.channel

    @channel.setter
    def channel(self, channel: Channel) -> None:
        self.outbox.channel = channel

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
        inbox = self.inbox
        self.executor = build_executor(
            plan, registry, pipeline, inbox.on_pending_complete, inbox.on_pending_start
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
            idempotent_tools=frozenset(
                f"{tool.name}__{export.name}"
                for tool in (*plan.tools, *plan.registry_tools)
                for export in tool.exports
                if export.idempotent
            ),
            approvals=self.approvals,
            governor=self.governor,
            before_tool_call=self.channel.write_now,
        )
        runner = self.turns = TurnRunner(
            settings,
            max_steps=plan.max_steps_per_turn,
            on_max_steps=plan.on_max_steps,
            runtime_factory=self._runtime_for,
            inbox=inbox.take,
            events=self.outbox.report_event,
            logger=self.log,
            text_sinks=self.outbox.text_sink,
            max_turn_attempts=plan.max_turn_attempts,
        )
        instances = self.instances = InstanceManager(
            self.name,
            Path(plan.state_dir),
            runner,
            on_busy_change=self.outbox.report_busy,
            check_workdir=functools.partial(check_recorded_workdir, plan),
            storage=storage,
            concurrency=plan.concurrency,
        )
        self.governor.on_instance_usage = instances.usage_changed
        self.governor.flush = self.channel.write_now
        inbox.instances = self.requests.instances = instances
        self.shutdown.instances, self.shutdown.approvals = instances, self.approvals
        self.operations.attach(
            instances=instances,
            turns=runner,
            approvals=self.approvals,
            extensions=self.extensions,
        )
        inbox.close_lost_handles()

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
            self.outbox.tell(BootFailed(str(exc)))
            await self.channel.flush()
            return EXIT_BOOT_FAILURE
        try:
            self.outbox.send(self.outbox.event(Ready(os.getpid(), os.environ.get(SCOPE_ENV))))
        except Exception:  # the Orchestrator left while we booted: nobody to serve
            self.log.info("orchestrator gone before the agent was ready; exiting")
            await self._stop()
            return 0
        # At debug: the daemon logs each agent's readiness, and an idle agent that logs
        # nothing never starts its log writer thread.
        self.log.debug("agent ready")
        self.operations.resume_parked_turns()
        await self.shutdown.finished.wait()
        await self._stop()
        return self.shutdown.exit_code

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
        lean_client = sys.modules.get("agent_process.models._http1")
        if lean_client is not None:  # loaded only by an agent that called a provider with it
            lean_client.close_pools()
        killed = kill_scope(os.environ.get(SCOPE_ENV))
        if killed:
            self.log.info("tool programs ended with the agent", pids=killed)
        await self.channel.flush()  # the answers of the Turns cut short above go out first
        self.channel.close()

    def on_message(self, message: IpcMessage) -> None:
        """Dispatch one message from the Orchestrator (called by the channel)."""
        try:
            self._dispatch(message)
        except Exception as exc:  # a bug in dispatch must not kill the agent, nor hang a caller
            self.log.exception("failed to handle message", type=message.type)
            error = IpcError(
                f"the agent could not take the request: {exc!r}", code=DeliveryCode.E_INTERNAL
            )
            if isinstance(message, DelegateMessage):
                self.outbox.refuse(message.sender, message.correlation_id, error)

    # -- the dispatch table ------------------------------------------------------------------

    @property
    def event_handlers(self) -> dict[EventKind, Callable[[EventMessage, Any], None]]:
        """What each event kind from the Orchestrator does."""
        operations = self.operations
        return {
            EventKind.SEND: self.requests.on_send,
            EventKind.SEND_FAILED: self.inbox.on_send_failed,
            EventKind.SPAWN_RESULT: self._on_answer,
            EventKind.LIST_RESULT: self._on_answer,
            EventKind.CONFIG_CHECK_RESULT: self._on_answer,
            EventKind.MODEL_PERMIT_RESULT: self._on_answer,
            EventKind.PREPARE_INSTANCE: operations.prepare,
            EventKind.DELETE_INSTANCE: operations.delete,
            EventKind.RESTART_INSTANCE: operations.restart,
            EventKind.APPROVAL_DECISION: operations.decide_approval,
            EventKind.CANCEL: operations.cancel,
            EventKind.LEADER_CHANGED: self._leader_changed,
        }

    def _dispatch(self, message: IpcMessage) -> None:
        if isinstance(message, DelegateMessage):
            self.requests.on_delegate(message)
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
        elif isinstance(message, ShutdownMessage) and not self.shutdown.draining:
            self.shutdown.begin(self.shutdown.request(message.payload))

    def _on_answer(self, message: EventMessage, body: EventBody) -> None:
        self.correlations.resolve(message.correlation_id, body)

    def _leader_changed(self, message: EventMessage, body: LeaderChanged) -> None:
        """What the previous leader owed this agent will never come: answer it ourselves."""
        waiting = len(self.correlations)
        self.correlations.fail_all(
            IpcError(
                "the cluster's leader went away before answering; a standby leads now "
                "(whether the request ran is not known)",
                code=DeliveryCode.LEADER_LOST,
            )
        )
        self.log.warning("taken over by a new leader", leader=body.leader, answers_lost=waiting)
