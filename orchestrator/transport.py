"""How the supervisor starts and talks to agent workers: a narrow seam.

A :class:`Transport` starts workers; a :class:`Worker` takes messages, reports its exit through a
future, and can be closed, terminated or killed. That is all the supervisor knows of a process,
so a worker on another host (or the fake of :mod:`orchestrator.testing`) fits the same seam.

:class:`MultiprocessingTransport` starts each AgentProcess through a ``forkserver`` context
(never plain ``fork`` beside a running event loop) whose server has the heavy modules
preloaded, so a new agent is ready in milliseconds. A worker's exit is noticed at once through
its process sentinel (no polling).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.process
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from typing import Any, Protocol

from bundle.plan import AgentPlan, Plan
from ipc import Channel, IpcMessage
from orchestrator._child import run_entry
from orchestrator.status import ExitInfo

AGENT_ENTRY = "agent_process.main:serve"
CONNECTOR_ENTRY = "connector_process.main:serve"
PRELOAD = ["orchestrator._forkserver"]
"""Imported once in the fork server: it imports the runtime (agent and connector entry points,
uvloop, the built-in tools) and freezes it, so every child starts with it loaded and shared."""
PIPE_CLOSED_GRACE_SECONDS = 2.0
"""How long a child may live on after closing its pipe before it is terminated."""


class Worker(Protocol):
    """One running agent process, as the supervisor sees it."""

    name: str
    exited: asyncio.Future[ExitInfo]
    """Resolved with how the process ended, once it has."""

    @property
    def pid(self) -> int | None:
        """The OS process id, if it has one."""

    def send(self, message: IpcMessage) -> None:
        """Queue a message to the worker (never blocks); raises when it is gone."""

    def close(self) -> None:
        """Release the connection to an exited worker."""

    def terminate(self) -> None:
        """Ask the OS to stop it (SIGTERM)."""

    def kill(self) -> None:
        """Stop it now (SIGKILL)."""


class Transport(Protocol):
    """Starts workers."""

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> Worker:
        """Start the worker of ``name`` (an agent, or a Connection); its messages go to
        ``on_message``."""
        ...


@dataclass(eq=False)
class ProcessWorker:
    """A :class:`Worker` backed by a ``multiprocessing`` process and a pipe."""

    name: str
    process: Any
    channel: Channel
    exited: asyncio.Future[ExitInfo] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def pid(self) -> int | None:
        """The OS process id."""
        pid: int | None = self.process.pid
        return pid

    def send(self, message: IpcMessage) -> None:
        """Queue ``message``; raises ``PeerGone`` when the process is gone."""
        self.channel.send_nowait(message)

    def close(self) -> None:
        """Close our end of the pipe."""
        self.channel.close()

    def pipe_closed(self) -> None:
        """The pipe closed: the child is exiting, or broken. One that lingers is killed, so a
        closed pipe always ends in an exit the supervisor sees."""
        if not self.exited.done():
            asyncio.get_running_loop().call_later(PIPE_CLOSED_GRACE_SECONDS, self._linger_check)

    def _linger_check(self) -> None:
        # SIGKILL, not SIGTERM: an agent answers SIGTERM by draining its Turns, which is
        # pointless without a pipe to answer through, and its loop may be what is stuck.
        if not self.exited.done():
            self.kill()

    def terminate(self) -> None:
        """SIGTERM, if still running."""
        if self.process.exitcode is None:
            self.process.terminate()

    def kill(self) -> None:
        """SIGKILL, if still running."""
        if self.process.exitcode is None:
            self.process.kill()


def _start_untracked(process: Any) -> None:
    """``process.start()``, then out of ``multiprocessing``'s own registry of children.

    Every ``start()`` polls each child still in that registry (a ``wait()`` per child: about
    40 µs each here, so some 20 ms per start with 500 agents running, and a quadratic cost to
    start them all). The transport notices each exit through the process sentinel and joins
    the process itself, so nothing needs the registry; what it would also do, terminate and
    join daemonic children at interpreter exit, agents do by themselves: they exit when the
    pipe closes.
    """
    process.start()
    children = getattr(multiprocessing.process, "_children", None)
    if children is not None:
        children.discard(process)


class MultiprocessingTransport:
    """Starts AgentProcesses as ``multiprocessing`` children."""

    def __init__(
        self,
        method: str = "forkserver",
        entry: str = AGENT_ENTRY,
        connector_entry: str = CONNECTOR_ENTRY,
    ) -> None:
        self.context: BaseContext = multiprocessing.get_context(method)
        if method == "forkserver":
            self.context.set_forkserver_preload(PRELOAD)
        self.entry = entry
        self.connector_entry = connector_entry

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> ProcessWorker:
        """Start ``name``'s process; returns once it exists (not once it is ready)."""
        parent_end, child_end = self.context.Pipe()
        agent = isinstance(plan, AgentPlan)
        process = self.context.Process(  # type: ignore[attr-defined]
            target=run_entry,
            # The plan crosses as the validated object it is: the child does not validate it
            # again (for a scripted model, compiling every rule's regex was a good part of
            # an agent's start).
            args=(self.entry if agent else self.connector_entry, child_end, plan),
            name=f"goondan-{'agent' if agent else 'connector'}:{name}",
            daemon=True,
        )
        # start() talks to the fork server and waits for the pid: keep it off the loop.
        await asyncio.to_thread(_start_untracked, process)
        child_end.close()
        holder: list[ProcessWorker] = []
        channel = await Channel.open(
            parent_end, name, on_message=on_message, on_close=lambda: holder[0].pipe_closed()
        )
        worker = ProcessWorker(name=name, process=process, channel=channel)
        holder.append(worker)
        loop = asyncio.get_running_loop()

        def on_sentinel() -> None:
            loop.remove_reader(process.sentinel)
            process.join(timeout=0)
            if not worker.exited.done():
                worker.exited.set_result(ExitInfo(process.exitcode))

        loop.add_reader(process.sentinel, on_sentinel)
        return worker
