"""An agent process on a node, as the leader's supervisor sees it: a :class:`Worker` whose
frames cross two NATS subjects of its own (:mod:`orchestrator.cluster.relay`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ipc import IpcMessage
from ipc.codec import FrameDecoder, IpcProtocolError, encode
from orchestrator.cluster.relay import EXIT_HEADER, Outbox
from orchestrator.status import ExitInfo


class ClusterTransport(Protocol):
    """What a remote worker asks of the leader's transport that started it (passed in, since
    :class:`orchestrator.cluster.leader.ClusterTransport` builds on this module)."""

    @property
    def log(self) -> Any:
        """The cluster's structlog logger."""

    def forget(self, worker: RemoteWorker) -> None:
        """Stop listening to ``worker``."""

    def signal(self, worker: RemoteWorker, signal_name: str) -> None:
        """Ask ``worker``'s node to send it ``SIG<signal_name>``."""


class WorkerGone(ConnectionError):
    """The remote agent process has exited; nothing more can be sent to it."""


@dataclass(eq=False)
class RemoteWorker:
    """An agent process on a node, as the supervisor sees it (:class:`Worker`)."""

    name: str
    node_name: str
    worker_id: str
    transport: ClusterTransport
    on_message: Callable[[IpcMessage], None]
    exited: asyncio.Future[ExitInfo] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    remote_pid: int | None = None
    node_incarnation: str = ""
    _decoder: FrameDecoder = field(default_factory=FrameDecoder)
    _outbox: Outbox | None = None
    _subscription: Any = None

    @property
    def pid(self) -> int | None:
        """The process id on its node, while it runs."""
        return None if self.exited.done() else self.remote_pid

    @property
    def node(self) -> str:
        """The node it runs on."""
        return self.node_name

    def send(self, message: IpcMessage) -> None:
        """Queue ``message`` to the agent; raises once it has exited."""
        if self.exited.done() or self._outbox is None:
            raise WorkerGone(f"agent {self.name!r} on node {self.node_name!r} has exited")
        self._outbox.write(encode(message))

    def close(self) -> None:
        """Stop listening to the exited process."""
        self.transport.forget(self)

    def terminate(self) -> None:
        """SIGTERM, through its node."""
        self.transport.signal(self, "TERM")

    def kill(self) -> None:
        """SIGKILL, through its node."""
        self.transport.signal(self, "KILL")

    # -- from the node ---------------------------------------------------------------------

    async def _received(self, msg: Any) -> None:
        headers = msg.headers or {}
        if EXIT_HEADER in headers:
            try:
                code: int | None = int(headers[EXIT_HEADER])
            except ValueError:
                code = None
            self._exit(ExitInfo(code))
            return
        for item in self._decoder.feed(msg.data):
            if isinstance(item, IpcProtocolError):
                self.transport.log.warning(
                    "dropped malformed ipc frame",
                    agent=self.name,
                    node=self.node_name,
                    reason=item.reason,
                    detail=item.detail[:200],
                )
                continue
            try:
                self.on_message(item)
            except Exception:
                self.transport.log.exception("message handler failed", agent=self.name)

    def _exit(self, info: ExitInfo) -> None:
        if not self.exited.done():
            self.exited.set_result(info)
