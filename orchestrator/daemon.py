"""The Orchestrator: load the swarm, supervise its agents, route between them, stop cleanly."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from bundle import Bundle, load_bundle
from ipc import (
    EventMessage,
    IpcError,
    IpcMessage,
)
from orchestrator.control import ControlServer, socket_path
from orchestrator.eventlog import EventLog
from orchestrator.router import InFlightSend, Router
from orchestrator.status import ExitInfo
from orchestrator.supervisor import AgentHandle, Supervisor
from orchestrator.transport import MultiprocessingTransport, Transport


def default_state_dir(bundle_path: Path) -> Path:
    """``.goondan/`` beside goondan.yaml."""
    return bundle_path.resolve().parent / ".goondan"


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state directory private to the daemon's user (0700), tightening an older one.

    Conversations, tool workspaces and runtime events live under it; with the directory itself
    closed to others, nothing inside is readable by them whatever its own mode.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if state_dir.stat().st_uid == os.geteuid():
        state_dir.chmod(0o700)


class Orchestrator:
    """One swarm, running."""

    def __init__(
        self,
        bundle_path: Path,
        *,
        state_dir: Path | None = None,
        swarm: str | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.bundle_path = bundle_path
        self.state_dir = (state_dir or default_state_dir(bundle_path)).resolve()
        self.bundle: Bundle = load_bundle(bundle_path, check_handlers=False)
        self.swarm_name = swarm
        self.swarm = self.bundle.swarm(swarm)
        self.entry_agent: str = self.swarm.spec.entry_agent.name
        plans = self.build_plans(self.bundle)
        self.grace: float = float(self.swarm.spec.policy.shutdown.grace_period_seconds)
        timeout_ms = int(self.swarm.spec.policy.request_timeout_seconds * 1000)
        prepare_state_dir(self.state_dir)
        self.events = EventLog(self.state_dir)
        self.supervisor = Supervisor(
            plans,
            transport or MultiprocessingTransport(),
            on_message=self._on_message,
            on_exit=self._on_exit,
            on_lifecycle=self.events.lifecycle,
        )
        self.router = Router(
            self.supervisor,
            default_timeout_ms=timeout_ms,
            on_delivery_lost=self._on_delivery_lost,
        )
        self.control = ControlServer(self, socket_path(self.state_dir))
        self._kept: set[asyncio.Task[Any]] = set()
        self.log = structlog.get_logger("goondan.orchestrator").bind(swarm=self.swarm.name)
        self._stopped = asyncio.Event()
        self._run_task: asyncio.Task[None] | None = None
        self._signals = 0
        self.stopping = False
        """Shutting down: control requests that would start work are refused."""

    async def ask_agent(self, agent: str, kind: str, **fields: Any) -> dict[str, Any]:
        """Ask a running agent something (see :meth:`Router.ask`)."""
        return await self.router.ask(agent, kind, **fields)

    def _on_message(self, sender: str, message: IpcMessage) -> None:
        if isinstance(message, EventMessage) and message.kind == "runtime_event":
            runtime_event = message.fields.get("event")
            if isinstance(runtime_event, dict):
                self.events.append(runtime_event)
            return
        if isinstance(message, EventMessage) and message.kind == "restart_request":
            reason = str(message.fields.get("reason") or "tool:self-restart")
            self.log.info("agent asked for a restart", agent=sender, reason=reason)
            self.events.lifecycle("restart_requested", sender, reason=reason)
            self.keep(asyncio.ensure_future(self.supervisor.restart_agent(sender, self.grace)))
            return
        self.router.on_message(sender, message)

    def _on_delivery_lost(self, send: InFlightSend, error: IpcError) -> None:
        self.events.append(
            {
                "type": "delivery.lost",
                "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "agentName": send.target,
                "instanceKey": send.message.fields.get("instanceKey"),
                "traceId": send.message.fields.get("traceId"),
                "eventId": send.event_id,
                "sender": send.sender,
                "senderInstanceKey": send.sender_instance_key,
                "started": send.started,
                "attempts": send.attempts,
                "error": error.to_dict(),
            }
        )

    def _on_exit(self, name: str, info: ExitInfo) -> None:
        self.router.on_agent_exit(name)

    async def start(self) -> None:
        """Open the control socket, start supervising and the entry agent (the others start
        on first use). Raises ``DaemonAlreadyRunning`` if another daemon owns the state."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        await self.control.start()
        self._report_unfolded()
        gc.freeze()  # keep the loaded bundle out of the collector's way
        self._run_task = asyncio.ensure_future(self.supervisor.run())
        self.log.info("orchestrator started", pid=os.getpid(), state_dir=str(self.state_dir))
        await self.supervisor.ensure_running(self.entry_agent)

    async def request(
        self, text: str, *, agent: str | None = None, instance_key: str = "default"
    ) -> dict[str, Any]:
        """Send ``text`` to ``agent`` (default: the entry agent) and wait for the answer."""
        return await self.router.request(agent or self.entry_agent, text, instance_key=instance_key)

    def _report_unfolded(self) -> None:
        """After a crash: name the conversations with events not yet folded into their base.

        They are not lost: each resumes from ``base + events`` when its agent next runs it.
        """
        for events in sorted(self.state_dir.glob("agents/*/instances/*/conversation/events.jsonl")):
            try:
                pending = events.stat().st_size > 0
            except OSError:
                continue
            if pending:
                agent = events.parents[3].name
                instance = events.parents[1].name
                self.log.warning(
                    "resuming an interrupted conversation", agent=agent, instance=instance
                )
                self.events.lifecycle("resume_pending", agent, instance=instance)

    def build_plans(self, bundle: Bundle) -> dict[str, dict[str, Any]]:
        """The plan of every agent of the swarm, as the JSON its process receives."""
        swarm = bundle.swarm(self.swarm_name)
        return {
            agent.name: bundle.agent_plan(agent.name, self.state_dir, swarm.name).model_dump(
                mode="json"
            )
            for agent in bundle.swarm_agents(swarm)
        }

    async def apply_plans(self, plans: dict[str, dict[str, Any]]) -> list[str]:
        """Adopt new plans: restart the running agents whose plan changed, add new agents,
        stop removed ones. Returns the restarted agents' names."""
        supervisor = self.supervisor
        restarted = []
        for name, plan in plans.items():
            handle = supervisor.handles.get(name)
            if handle is None:
                supervisor.handles[name] = AgentHandle(name, plan)
            elif handle.plan != plan:
                handle.plan = plan
                if handle.worker is not None:
                    start = supervisor.restart_agent(name, self.grace)
                elif handle.wanted and supervisor.is_down(name):
                    # Backing off (a boot failure, say): a new configuration is a new chance.
                    start = supervisor.start_afresh(name)
                else:
                    continue  # not running: it starts with the new plan on first use
                try:
                    await start
                except (IpcError, TimeoutError) as exc:
                    # It backs off like any agent that cannot boot; a later edit that fixes
                    # it is applied like any other change.
                    self.log.error(
                        "agent did not start with the new configuration", agent=name, error=str(exc)
                    )
                restarted.append(name)
        for name in [n for n in supervisor.handles if n not in plans]:
            await supervisor.stop_agent(name, self.grace, "config_change")
            del supervisor.handles[name]
        return restarted

    def status(self) -> list[dict[str, Any]]:
        """One row per agent: process state, instances on disk, pending delegates."""
        rows = self.supervisor.status()
        for row in rows:
            name = row["agent"]
            instances = self.state_dir / "agents" / name / "instances"
            row["instances"] = (
                sorted(p.name for p in instances.iterdir()) if instances.is_dir() else []
            )
            row["pendingDelegates"] = sum(
                1 for p in self.router.pending.values() if p.target == name
            )
        return rows

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Own a background task until it finishes."""
        self._kept.add(task)
        task.add_done_callback(self._kept.discard)

    def install_signal_handlers(self, on_signal: Callable[[int], None] | None = None) -> None:
        """SIGINT/SIGTERM start a graceful stop; a second one forces it (STYLE 2)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal or self.handle_signal, sig)

    def handle_signal(self, sig: int) -> None:
        """Queue a stop (or force it on the second signal)."""
        self._signals += 1
        if self._signals == 1:
            self.log.info("stopping", signal=signal.Signals(sig).name)
            self.supervisor.stop_restarting()
            self._stopped.set()
        else:
            self.log.warning("second signal: killing every agent now")
            self.supervisor.kill_all()

    async def wait_stopped(self) -> None:
        """Until a signal asks the daemon to stop."""
        await self._stopped.wait()

    def request_stop(self) -> None:
        """Ask :meth:`wait_stopped` to return."""
        self._stopped.set()

    async def shutdown(self) -> None:
        """Let running Turns finish and answer (within the grace period), stop every agent,
        then fail whatever is still pending.

        The control socket stays open until the agents are gone: while they drain, ``status``
        shows it, ``send`` and ``restart`` are refused, and ``instances delete`` still goes
        through the agent (which refuses while a Turn of the instance runs). Closed first, it
        would let the CLI delete the files itself under a Turn that then writes them back, and
        let a second daemon start on the same state.
        """
        self.stopping = True
        for task in list(self._kept):
            task.cancel()
        await self.supervisor.shutdown(self.grace)
        await self.router.close()
        await self.control.close()
        if self._run_task is not None:
            self._run_task.cancel()
            await asyncio.gather(self._run_task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        self.events.close()
        self.log.info("orchestrator stopped")
