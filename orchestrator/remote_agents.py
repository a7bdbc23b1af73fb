"""Calls to a swarm's RemoteAgents: A2A agents elsewhere that its agents delegate to.

A ``delegate`` (or ``send``) whose target is a RemoteAgent never reaches an agent process:
the router hands it here (see :mod:`orchestrator.router_remote`), and the answer comes back
to the caller as any target's would. One call, through the official ``a2a-sdk`` client:

1. fetch the agent card at ``cardUrl`` as is (a redirect is refused, the body must be JSON
   of at most :data:`MAX_CARD_BYTES`) and read it with the SDK's own card parser;
2. send the text as a user message whose ``contextId`` is the target instance key of the
   handoff (the caller's own instance key unless it named another), so one conversation of
   ours stays one conversation there;
3. follow the task (streamed when the card says it streams) until it ends: ``completed``
   answers the text of its artifacts (else of its status message, or of a direct message
   reply); ``failed``, ``rejected``, ``canceled``, ``auth-required`` and ``input-required``
   are answered ``REMOTE_AGENT_FAILED`` saying which, as is anything the transport reports.

Every response body is capped (:data:`MAX_BODY_BYTES`) as it is read, the whole call is
bounded by the request's timeout (and the RemoteAgent's ``timeoutSeconds``), and a call
cancelled once its task is known (the request's trace cancelled, or its timeout) cancels the
remote task too, in the background and bounded. The bearer token is resolved when the swarm
starts, withheld from every process the daemon starts, and added only to requests whose
origin is the card's own: a card naming another host for its interface gets no token there.
No message of this module carries it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ipc import RequestTimeout
from orchestrator.remote_targets import (
    CANCEL_SECONDS,
    MAX_ANSWER_CHARS,
    MAX_BODY_BYTES,
    MAX_CARD_BYTES,
    RemoteAgentFailed,
    RemoteAgentsUnavailable,
    RemoteTarget,
    remote_targets,
)

if TYPE_CHECKING:
    from orchestrator.remote_agent_calls import RemoteCall

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_BODY_BYTES",
    "MAX_CARD_BYTES",
    "RemoteAgentFailed",
    "RemoteAgents",
    "RemoteAgentsUnavailable",
    "RemoteTarget",
    "remote_targets",
]


class RemoteAgents:
    """The swarm's RemoteAgents by name, and the calls to them."""

    def __init__(self, targets: dict[str, RemoteTarget] | None = None) -> None:
        self.targets = dict(targets or {})
        self._calls: set[asyncio.Task[object]] = set()
        """The tasks waiting in :meth:`ask` (stopped by :meth:`aclose`)."""
        self._cancels: set[asyncio.Task[None]] = set()

    def __contains__(self, name: object) -> bool:
        return name in self.targets

    def secrets(self) -> list[str]:
        """The tokens' values, for the daemon to withhold from every process it starts."""
        return [t.token.reveal() for t in self.targets.values() if t.token is not None]

    async def ask(self, name: str, text: str, *, context_id: str, timeout_seconds: float) -> str:
        """The answer of RemoteAgent ``name`` to ``text`` in conversation ``context_id``.

        Raises :class:`RemoteAgentFailed` (or ``RequestTimeout`` past ``timeout_seconds`` or
        the RemoteAgent's own ``timeoutSeconds``); cancelled, it cancels the remote task."""
        # The HTTP client and the SDK come with the a2a extra, so only a call imports them:
        # a swarm without RemoteAgents starts without either.
        from orchestrator.remote_agent_calls import RemoteCall

        target = self.targets[name]
        limit = min(timeout_seconds, target.timeout_seconds or timeout_seconds)
        call = RemoteCall(target, text, context_id)
        waiting = asyncio.current_task()
        if waiting is not None:
            self._calls.add(waiting)
        try:
            async with asyncio.timeout(limit):
                return await call.run()
        except TimeoutError:
            self._cancel_soon(call)
            raise RequestTimeout(
                f"the remote A2A agent did not answer within {limit:g} s"
            ) from None
        except asyncio.CancelledError:
            self._cancel_soon(call)
            raise
        finally:
            if waiting is not None:
                self._calls.discard(waiting)

    def _cancel_soon(self, call: RemoteCall) -> None:
        from orchestrator.remote_agent_calls import cancel_remote

        if call.sent:
            task = asyncio.create_task(cancel_remote(call))
            self._cancels.add(task)
            task.add_done_callback(self._cancels.discard)

    async def aclose(self) -> None:
        """Stop the calls still waiting, then wait (bounded) for the remote tasks they
        started to be cancelled."""
        calls = list(self._calls)
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls, timeout=CANCEL_SECONDS)
        if self._cancels:
            await asyncio.wait(list(self._cancels), timeout=CANCEL_SECONDS)
            for task in self._cancels:
                task.cancel()
