"""The router's way to a RemoteAgent: a request or send whose target is one of the swarm's
RemoteAgents is answered by a call through :mod:`orchestrator.remote_agents` instead of an
agent process, with the same guarantees as any target's: exactly one answer, within the
request's timeout, ``CANCELLED`` when its trace is cancelled (which cancels the remote task),
``SHUTTING_DOWN`` when the swarm stops.

The remote conversation is the handoff's target instance key (``agents__request``'s
``instanceKey``, by default the caller's own): it travels as the A2A ``contextId``.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Coroutine
from typing import Any

from goondan.defaults import MAX_REQUEST_TIMEOUT_MS
from ipc import Cancelled, IpcError
from ipc.delegation import DelegateAnswer, Handoff
from orchestrator.pending import Pending
from orchestrator.remote_agents import RemoteAgents
from orchestrator.router_sends import InFlightSend


class RemoteRouting:
    """The RemoteAgent half of a :class:`~orchestrator.router.Router`."""

    remote: RemoteAgents
    default_timeout_ms: int
    sends: dict[str, InFlightSend]
    _remote_calls: dict[str, asyncio.Task[Any]]
    """Calls to RemoteAgents under way, by the request's correlation id or the send's id."""

    @abstractmethod
    def _take(self, correlation_id: str) -> Pending | None:
        """Remove a pending request (it is being answered) and its timer."""

    @abstractmethod
    def _resolve(self, pending: Pending, answer: DelegateAnswer) -> None:
        """Hand ``answer`` to the request's caller."""

    @abstractmethod
    def _fail(self, pending: Pending, error: IpcError) -> None:
        """Answer the request with ``error`` (a no-op when it was answered)."""

    @abstractmethod
    def _finish_send(self, send: InFlightSend, error: IpcError | None = None) -> None:
        """The send is done with."""

    @abstractmethod
    def _send_lost(self, send: InFlightSend, error: IpcError) -> None:
        """Report a send that will not be (fully) handled to whoever sent it."""

    @abstractmethod
    def _start_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background."""

    def _timeout_seconds(self, handoff: Handoff) -> float:
        timeout_ms = handoff.timeout_ms
        if timeout_ms is None or timeout_ms <= 0:
            timeout_ms = self.default_timeout_ms
        return min(timeout_ms, MAX_REQUEST_TIMEOUT_MS) / 1000

    def _route_remote(self, pending: Pending) -> None:
        """Answer an admitted request to a RemoteAgent by calling it."""
        name = f"remote:{pending.target}:{pending.correlation_id}"
        call = self._start_task(self._ask_remote(pending), name)
        self._remote_calls[pending.correlation_id] = call

    async def _ask_remote(self, pending: Pending) -> None:
        handoff = pending.handoff
        assert handoff is not None  # admitted requests have theirs
        try:
            text = await self.remote.ask(
                pending.target,
                handoff.input,
                context_id=handoff.instance_key,
                timeout_seconds=self._timeout_seconds(handoff),
            )
        except IpcError as exc:
            self._remote_calls.pop(pending.correlation_id, None)
            self._fail(pending, exc)
            return
        self._remote_calls.pop(pending.correlation_id, None)
        if self._take(pending.correlation_id) is not None:
            self._resolve(pending, DelegateAnswer("ok", output=text))

    def _stop_remote_call(self, key: str) -> None:
        """Cancel the call under way for ``key`` (its caller was answered otherwise)."""
        call = self._remote_calls.pop(key, None)
        if call is not None:
            call.cancel()

    async def _send_remote(self, send: InFlightSend) -> None:
        """Deliver a fire-and-forget send to a RemoteAgent: its answer is told to the sender's
        ``on_answer`` as a local Turn's is, a failure reported like any lost send."""
        running = asyncio.current_task()
        assert running is not None  # started as a task by the send's delivery
        self._remote_calls[send.event_id] = running
        send.started = True
        if send.on_started is not None:
            send.on_started()
        try:
            text = await self.remote.ask(
                send.target,
                send.handoff.input,
                context_id=send.handoff.instance_key,
                timeout_seconds=self._timeout_seconds(send.handoff),
            )
        except IpcError as exc:
            self._send_lost(send, exc)
            return
        finally:
            self._remote_calls.pop(send.event_id, None)
        if send.on_answer is not None:
            send.on_answer(text, None)
        self._finish_send(send)

    def _cancel_remote_sends(self, trace_id: str, reason: str) -> None:
        """Cancel the sends of ``trace_id`` to RemoteAgents under way (and their tasks)."""
        for send in [s for s in self.sends.values() if s.handoff.trace_id == trace_id]:
            if send.event_id in self._remote_calls:
                self._stop_remote_call(send.event_id)
                self._send_lost(send, Cancelled(f"the request was cancelled: {reason}"))
