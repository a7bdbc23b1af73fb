"""The rows of the Router's pending-request table, and the call cycles they would close.

Each request waiting for its answer is a :class:`Pending` row. A synchronous request from an
agent also blocks one conversation (its caller's Turn) on another (the Turn that answers it), so
the rows are a graph of conversations waiting for each other. Instance queues are serial: a
request that would close a cycle in that graph, within its own call chain (:func:`chain_cycle`)
or across the requests already pending (:func:`wait_cycle`), would deadlock until every request
on the cycle timed out. The Router refuses it ``CIRCULAR_CALL_DETECTED`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from goondan.time import utc_timestamp
from ipc import CircularCall
from ipc.delegation import DelegateAnswer, Handoff
from ipc.messages import DelegateMessage
from orchestrator.clock import Timer


@dataclass(eq=False)
class Pending:
    """A request waiting for its answer."""

    correlation_id: str
    caller: str
    target: str
    timer: Timer | None = None
    future: asyncio.Future[DelegateAnswer] | None = None
    """Set for external callers: resolved with the answer."""
    waiter: str | None = None
    """The conversation (:func:`~ipc.protocol.call_node`) whose Turn is blocked on this answer:
    the caller's, for a synchronous request from an agent; ``None`` otherwise."""
    awaited: str = ""
    """The conversation that must run the Turn answering it."""
    trace_id: str = ""
    instance_key: str = ""
    started_at: float = 0.0
    """When it was admitted (``time.time()``; formatted only when listed: this is the hot
    path of every request)."""
    message: DelegateMessage | None = None
    """The request as its caller sent it (delivered again after the target died)."""
    handoff: Handoff | None = None
    """Its payload, read once at admission."""
    attempt: int = 1
    """Deliveries to the target so far: one more each time the target died under it."""
    start_deaths: int = 0
    """Times its target was found dead while starting, as the request waited to be delivered
    again: past as many as the deliveries it may have, it is answered ``AGENT_CRASHED``."""
    carrier: asyncio.Task[None] | None = None
    """Set while it waits for its dead target's restart, to be delivered again (it ends by
    itself once the request is answered: cancelling it could cut a process start short)."""

    def to_json(self) -> dict[str, Any]:
        """A row of ``GET /v1/requests``."""
        return {
            "requestId": self.correlation_id,
            "traceId": self.trace_id,
            "caller": self.caller,
            "agent": self.target,
            "instanceKey": self.instance_key,
            "startedAt": utc_timestamp(self.started_at),
        }


def chain_cycle(chain: tuple[str, ...], node: str) -> CircularCall:
    """The refusal of a request to conversation ``node``, which its own call ``chain`` (the
    conversations already waiting on it, outermost first) holds already."""
    cycle = [*chain, node]
    message_text = "Circular call detected: " + " -> ".join(cycle)
    return CircularCall(message_text, details={"chain": cycle})


def wait_cycle(node: str, waiter: str, rows: Iterable[Pending]) -> CircularCall | None:
    """The refusal of a request that blocks ``waiter`` on ``node`` while ``node`` waits already
    (through the pending ``rows``, transitively) for ``waiter``; ``None`` when it does not."""
    loop = wait_path(rows, node, waiter)
    if loop is None:
        return None
    cycle = [waiter, *loop]
    text = "Circular call detected across requests: " + " -> ".join(cycle)
    return CircularCall(text, details={"chain": cycle})


def wait_path(rows: Iterable[Pending], start: str, goal: str) -> list[str] | None:
    """The conversations from ``start`` to ``goal`` along the "blocked waiting for" edges of
    the pending ``rows``, or ``None`` when ``start`` does not wait for ``goal``."""
    edges: dict[str, list[str]] = {}
    for pending in rows:
        if pending.waiter is not None and pending.awaited:
            edges.setdefault(pending.waiter, []).append(pending.awaited)
    if start not in edges:
        return None
    trail: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        current = frontier.pop()
        for following in edges.get(current, ()):
            if following in trail:
                continue
            trail[following] = current
            if following == goal:
                path = [following]
                step: str | None = current
                while step is not None:
                    path.append(step)
                    step = trail[step]
                return path[::-1]
            frontier.append(following)
    return None
