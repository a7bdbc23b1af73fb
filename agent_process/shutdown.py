"""How an AgentProcess stops.

A drain (a ``shutdown`` from the Orchestrator, SIGTERM, or the process's own decision after a
tool broke its standard descriptors) refuses new work, lets running Turns finish within the
grace period, acknowledges and ends the process. When the pipe to the Orchestrator closes
the process ends at once: no agent outlives it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from agent_process.approvals import ApprovalGate
from agent_process.instances import InstanceManager
from agent_process.outbox import Outbox
from goondan.time import utc_timestamp
from ipc import IpcError
from ipc.delegation import ShutdownRequest
from ipc.events import ShutdownAck
from ipc.logs import log_writer
from ipc.protocol import EXIT_BROKEN_FDS
from ipc.runtime_events import ProcessBrokenFdsEvent


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


class Shutdown:
    """The process's way out: whether it drains, until when, and with which exit code."""

    instances: InstanceManager | None = None
    """The Turns a drain waits for; set once the agent has booted."""
    approvals: ApprovalGate | None = None
    """Parked calls a drain suspends; set once the agent has booted."""

    def __init__(self, outbox: Outbox, grace_seconds: float, log: Any) -> None:
        self._outbox = outbox
        self._grace_ms = int(grace_seconds * 1000)
        self._log = log
        self.draining = False
        """Set when a drain begins: no new Turn starts from then on."""
        self.finished = asyncio.Event()
        """Set when the process should exit (drained, or the Orchestrator is gone)."""
        self.exit_code = 0
        self._deadline: float | None = None
        """Loop time at which the grace period of the current drain ends."""
        self._standard_fds = standard_fd_identities()
        self._tasks: set[asyncio.Task[None]] = set()

    def request(self, payload: dict[str, Any]) -> ShutdownRequest:
        """The Orchestrator's ``shutdown`` message read, with the plan's grace period when it
        names none (or cannot be read)."""
        try:
            return ShutdownRequest.from_wire(payload, self._grace_ms)
        except IpcError:
            return ShutdownRequest(self._grace_ms, "orchestrator")

    def own(self, reason: str) -> ShutdownRequest:
        """A drain this process starts by itself, with the plan's grace period."""
        return ShutdownRequest(self._grace_ms, reason)

    def begin(self, request: ShutdownRequest) -> None:
        """Refuse new work from now on; drain, acknowledge, then let the process exit."""
        self.draining = True
        if self.approvals is not None:
            # A Turn parked on an approval would hold the drain for its whole grace period;
            # it ends now instead and is resumed, still parked, when the agent starts again.
            self.approvals.suspend_all()
        self._deadline = asyncio.get_running_loop().time() + request.grace_seconds
        task = asyncio.ensure_future(self._drain(request))
        self._tasks.add(task)
        task.add_done_callback(lambda _: self.finished.set())

    async def _drain(self, request: ShutdownRequest) -> None:
        """Let running Turns finish within the grace period, then acknowledge."""
        assert self.instances is not None
        grace = request.grace_seconds
        self._log.info("draining", grace_seconds=grace, reason=request.reason)
        try:
            async with asyncio.timeout(grace):
                await self.instances.drain()
        except TimeoutError:
            self._log.warning("turns still running at the end of the grace period")
        self._outbox.tell(ShutdownAck())
        await self._outbox.channel.flush()

    def on_sigterm(self) -> None:
        """SIGTERM (``systemctl stop`` signals every process of the group): drain like a
        ``shutdown`` from the Orchestrator, then exit 0.

        While draining, a SIGTERM within the grace period changes nothing (the group's signal
        during a restart's drain must not cut the Turn short); one after it (the supervisor's
        escalation) ends the process at once, by the signal's default action.
        """
        if self.draining:
            loop = asyncio.get_running_loop()
            if self._deadline is not None and loop.time() < self._deadline:
                self._log.info("SIGTERM while draining; the drain goes on")
                return
            self._log.warning("SIGTERM after the grace period; stopping now")
            log_writer().drain(0.5)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if self.instances is None:  # boot failed: the process is leaving anyway
            return
        self._log.info("SIGTERM; draining")
        self.begin(self.own("sigterm"))

    def on_pipe_closed(self) -> None:
        """The Orchestrator is gone: stop, so no agent outlives it."""
        if not self.finished.is_set():
            self._log.warning("orchestrator is gone; exiting")
            self.finished.set()

    def check_standard_fds(self) -> None:
        """After each Turn: a tool that closed or replaced stdin, stdout or stderr leaves the
        process half-broken (logs lost, or written into whatever file took the number), so
        the agent exits to be restarted clean rather than serve on like that."""
        now = standard_fd_identities()
        if now == self._standard_fds:
            return
        broken = [fd for fd in (0, 1, 2) if now[fd] != self._standard_fds[fd]]
        report = ProcessBrokenFdsEvent(
            timestamp=utc_timestamp(), agent_name=self._outbox.agent_name, fds=broken
        )
        self._outbox.report_event(report)
        self.exit_code = EXIT_BROKEN_FDS
        if not self.draining:  # let the other conversations' running Turns finish first
            self.begin(self.own("broken_fds"))
