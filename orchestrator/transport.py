"""How the supervisor starts and talks to agent workers: a narrow seam.

A :class:`Transport` starts workers; a :class:`Worker` takes messages, reports its exit through a
future, and can be closed, terminated or killed. That is all the supervisor knows of a process,
so a worker on another host (or the fake of :mod:`orchestrator.testing`) fits the same seam.

:class:`MultiprocessingTransport` starts each AgentProcess through a ``forkserver`` context
(never plain ``fork`` beside a running event loop) whose server has the heavy modules
preloaded, so a new agent is ready in milliseconds. It keeps a spare process forked ahead
(:data:`SPARE_PROCESSES`), which the next start takes: that start skips the fork and the
child's start-up, about a third of the time an agent takes to be ready. A worker's exit is
noticed at once through its process sentinel (no polling).

No process it starts holds a secret it does not use (:mod:`orchestrator.environment`): the fork
server is exec'd with no secret in its environment, and each child gets, with its plan, the
variables its plan names and sets them as its whole environment first thing.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any, Protocol

from bundle.plan import AgentPlan, Plan
from ipc import Channel, IpcMessage
from orchestrator._child import hand_output, run_entry, run_spare
from orchestrator.environment import child_environment, use_clean_launches
from orchestrator.process_logs import ProcessOutput
from orchestrator.status import ExitInfo

AGENT_ENTRY = "agent_process.main:serve"
CONNECTOR_ENTRY = "connector_process.main:serve"
PRELOAD = ["orchestrator._forkserver"]
"""Imported once in the fork server: it imports the runtime (agent and connector entry points,
uvloop, the built-in tools) and freezes it, so every child starts with it loaded and shared."""
PIPE_CLOSED_GRACE_SECONDS = 2.0
"""How long a child may live on after closing its pipe before it is terminated."""
PIPE_DRAIN_SECONDS = 1.0
"""How long an exit waits for the rest of what the child wrote before it died to be read (its
pipe's end): a child that outlives its own process through an inherited pipe end is not
waited for longer."""
SPARE_PROCESSES = 1
"""Processes forked ahead and waiting for a plan (``forkserver`` only): an agent started or
restarted while one waits is ready sooner by the fork and the child's start-up. Each costs
an idle process (about 3 MiB of its own memory)."""
SPARE_REFILL_DELAY_SECONDS = 0.1
"""After a start takes a spare, how long before the next is forked: not while the new agent
boots, which needs the CPU more."""
SPARE_SEND_IN_THREAD_BYTES = 64 * 1024
"""A plan this large is handed to a spare from a thread: the pipe may not hold it at once."""


class Worker(Protocol):
    """One running agent process, as the supervisor sees it."""

    name: str
    exited: asyncio.Future[ExitInfo]
    """Resolved with how the process ended, once it has."""

    @property
    def pid(self) -> int | None:
        """The OS process id, if it has one (on its own host)."""

    @property
    def node(self) -> str | None:
        """The cluster node it runs on; ``None`` for this host."""

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
    """Resolved once the process ended and everything it wrote was read (its pipe reached
    its end), or :data:`PIPE_DRAIN_SECONDS` after it ended: a message the child sent just
    before it died (a send's ``send_started``, an answer) is heard before its exit is."""
    _pipe_ended: bool = field(default=False, init=False, repr=False)
    _ended: ExitInfo | None = field(default=None, init=False, repr=False)

    @property
    def pid(self) -> int | None:
        """The OS process id."""
        pid: int | None = self.process.pid
        return pid

    @property
    def node(self) -> None:
        """Always this host."""
        return None

    def send(self, message: IpcMessage) -> None:
        """Queue ``message``; raises ``PeerGone`` when the process is gone."""
        self.channel.send_nowait(message)

    def close(self) -> None:
        """Close our end of the pipe."""
        self.channel.close()

    def pipe_closed(self) -> None:
        """The pipe closed: the child is exiting, or broken. One that lingers is killed, so a
        closed pipe always ends in an exit the supervisor sees."""
        self._pipe_ended = True
        if self._ended is not None:
            self._report_exit()
        elif not self.exited.done():
            asyncio.get_running_loop().call_later(PIPE_CLOSED_GRACE_SECONDS, self._linger_check)

    def process_ended(self, info: ExitInfo) -> None:
        """The process ended: its exit is reported once what it wrote has been read."""
        self._ended = info
        if self._pipe_ended:
            self._report_exit()
        else:
            asyncio.get_running_loop().call_later(PIPE_DRAIN_SECONDS, self._report_exit)

    def _report_exit(self) -> None:
        if self._ended is not None and not self.exited.done():
            self.exited.set_result(self._ended)

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


def _hand_plan(conn: Connection, data: bytes, output: tuple[int, int] | None) -> None:
    conn.send_bytes(data)
    if output is not None:
        hand_output(conn, *output)


class MultiprocessingTransport:
    """Starts AgentProcesses as ``multiprocessing`` children."""

    def __init__(
        self,
        method: str = "forkserver",
        entry: str = AGENT_ENTRY,
        connector_entry: str = CONNECTOR_ENTRY,
        spares: int = SPARE_PROCESSES,
        output: ProcessOutput | None = None,
    ) -> None:
        use_clean_launches()
        self.output = output
        """Where each child's stdout and stderr go (its own files, and the daemon's
        descriptors); ``None``: the child keeps the daemon's."""
        self.context: BaseContext = multiprocessing.get_context(method)
        if method == "forkserver":
            self.context.set_forkserver_preload(PRELOAD)
        self.entry = entry
        self.connector_entry = connector_entry
        self.spares = spares if method == "forkserver" else 0
        """How many spare processes to keep ready."""
        self._spares: list[tuple[Any, Connection]] = []
        self._refill: asyncio.TimerHandle | None = None
        self._forking: asyncio.Task[None] | None = None
        self._closed = False

    async def spawn(self, name: str, plan: Plan) -> tuple[Any, Connection]:
        """Start ``name``'s process: the ``multiprocessing`` process and our end of its pipe.

        :meth:`start` wraps them in a :class:`ProcessWorker`; a cluster node relays the pipe's
        bytes as they are instead.
        """
        agent = isinstance(plan, AgentPlan)
        entry = self.entry if agent else self.connector_entry
        # The plan crosses as the validated object it is: the child does not validate it
        # again (for a scripted model, compiling every rule's regex was a good part of an
        # agent's start).
        environment = child_environment(plan)
        kind = "agent" if agent else "connector"
        ends = self.output.pipes(f"{kind}:{name}") if self.output is not None else None
        try:
            started = await self._start_on_spare(entry, plan, environment, ends)
            if started is None:
                parent_end, child_end = self.context.Pipe()
                process = self.context.Process(  # type: ignore[attr-defined]
                    target=run_entry,
                    args=(entry, child_end, plan, environment, ends is not None),
                    daemon=True,
                )
                # start() talks to the fork server and waits for the pid: keep it off the loop.
                await asyncio.to_thread(_start_untracked, process)
                child_end.close()
                if ends is not None:
                    hand_output(parent_end, *ends)
            else:
                process, parent_end = started
        finally:
            # The child holds its own copies now (or failed to start): once it exits, its
            # pipes read empty and their readers end.
            for end in ends or ():
                os.close(end)
        process.name = f"goondan-{kind}:{name}"
        self._refill_soon()
        return process, parent_end

    async def start(
        self, name: str, plan: Plan, on_message: Callable[[IpcMessage], None]
    ) -> ProcessWorker:
        """Start ``name``'s process; returns once it exists (not once it is ready)."""
        process, parent_end = await self.spawn(name, plan)
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
            worker.process_ended(ExitInfo(process.exitcode))

        loop.add_reader(process.sentinel, on_sentinel)
        return worker

    @property
    def waiting_spares(self) -> list[int]:
        """The pids of the spare processes waiting now."""
        return [process.pid for process, _ in self._spares]

    async def _start_on_spare(
        self,
        entry: str,
        plan: Plan,
        environment: dict[str, str],
        output: tuple[int, int] | None = None,
    ) -> tuple[Any, Connection] | None:
        """Hand ``entry``, ``plan``, the process's ``environment`` and its ``output``
        descriptors to a waiting spare; ``None`` when none is there."""
        while self._spares:
            process, parent_end = self._spares.pop()
            if process.exitcode is not None:  # killed while it waited
                parent_end.close()
                continue
            data = pickle.dumps(
                (entry, plan, environment, output is not None), protocol=pickle.HIGHEST_PROTOCOL
            )
            try:
                if len(data) > SPARE_SEND_IN_THREAD_BYTES:
                    await asyncio.to_thread(_hand_plan, parent_end, data, output)
                else:
                    _hand_plan(parent_end, data, output)
            except OSError:  # it died just now: its exit goes unnoticed, like any spare's
                parent_end.close()
                continue
            return process, parent_end
        return None

    def _refill_soon(self) -> None:
        if (
            self._closed
            or self._refill is not None
            or self._forking is not None
            or len(self._spares) >= self.spares
        ):
            return
        self._refill = asyncio.get_running_loop().call_later(
            SPARE_REFILL_DELAY_SECONDS, self._fork_spare
        )

    def _fork_spare(self) -> None:
        self._refill = None
        self._forking = asyncio.ensure_future(self._forked_spare())

    async def _forked_spare(self) -> None:
        parent_end, child_end = self.context.Pipe()
        process = self.context.Process(  # type: ignore[attr-defined]
            target=run_spare, args=(child_end,), name="goondan-spare", daemon=True
        )
        try:
            await asyncio.to_thread(_start_untracked, process)
        except Exception:  # no spare this time; starts go the usual way meanwhile
            parent_end.close()
            return
        finally:
            child_end.close()
            self._forking = None
        if self._closed:
            parent_end.close()  # the spare sees the pipe close and exits
            return
        self._spares.append((process, parent_end))
        self._refill_soon()

    async def close(self) -> None:
        """Stop keeping spares, and end those waiting (they exit when their pipe closes)."""
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
            self._refill = None
        if self._forking is not None:  # a fork under way takes a moment: let it end, then close
            with contextlib.suppress(Exception):
                await asyncio.shield(self._forking)
        for _, parent_end in self._spares:
            parent_end.close()
        self._spares.clear()
