"""``agents__spawn`` and ``agents__list``: the instances agents prepare for one another.

An agent asks for an instance of another agent (``spawn_request``); the target agent creates it
unless it exists, asked with a ``prepare_instance`` question, since it owns its instance
directories. The instances created so are recorded by who asked, for ``agents__list``
(``list_request``); the daemon puts back the records of earlier runs when it starts.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from goondan.time import utc_timestamp
from ipc import IpcError
from ipc.payload import EventBody
from ipc.questions import (
    ListRequest,
    ListResult,
    PrepareInstance,
    PrepareInstanceResult,
    SpawnRequest,
    SpawnResult,
)
from orchestrator.supervisor import Supervisor

SpawnKey = tuple[str, str, str, str]
"""``(owner agent, owner instance key, target agent, instance key)``."""
Ask = Callable[[str, EventBody], Awaitable[EventBody]]
"""Ask a running agent a question and wait for its answer (:meth:`Router.ask`)."""


@dataclass
class SpawnedInstance:
    """An instance prepared with ``agents__spawn``: one ``agents__list`` row."""

    target: str
    instance_key: str
    owner_agent: str
    owner_instance_key: str
    created_at: str
    cwd: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``agents__list`` row."""
        return {
            "target": self.target,
            "instanceKey": self.instance_key,
            "ownerAgent": self.owner_agent,
            "ownerInstanceKey": self.owner_instance_key,
            "createdAt": self.created_at,
            "cwd": self.cwd,
        }


class Spawns:
    """The spawned instances, and the answers to ``spawn_request`` and ``list_request``."""

    def __init__(self, supervisor: Supervisor, ask: Ask) -> None:
        self.supervisor = supervisor
        self.ask = ask
        self.records: dict[SpawnKey, SpawnedInstance] = {}

    async def spawn(self, sender: str, body: SpawnRequest) -> SpawnResult:
        """``agents__spawn``: the target agent creates the instance unless it exists (it owns
        the instance directories, so ``spawned`` is true only for the one that made it). Why
        it could not is the answer's error."""
        target = body.target
        instance_key = body.instance_key or f"{target}-instance-{secrets.token_hex(4)}"
        try:
            await self.supervisor.ensure_running(target)
            answer = await self.ask(
                target,
                PrepareInstance(instance_key, body.cwd, sender, body.owner_instance_key),
            )
            assert isinstance(answer, PrepareInstanceResult)
            if answer.error is not None:
                raise answer.error
            if answer.created:
                owner_key = body.owner_instance_key
                self.records[(sender, owner_key, target, instance_key)] = SpawnedInstance(
                    target=target,
                    instance_key=instance_key,
                    owner_agent=sender,
                    owner_instance_key=owner_key,
                    created_at=utc_timestamp(),
                    cwd=answer.cwd,
                )
            return SpawnResult(target, instance_key, answer.created, answer.cwd)
        except IpcError as exc:
            return SpawnResult(error=exc)

    def listed(self, sender: str, body: ListRequest) -> ListResult:
        """``agents__list``: the instances ``sender``'s instance spawned (or anyone's, with
        ``include_all``), oldest first."""
        rows = sorted(
            (
                r
                for r in self.records.values()
                if body.include_all
                or (r.owner_agent == sender and r.owner_instance_key == body.owner_instance_key)
            ),
            key=lambda r: r.created_at,
        )
        return ListResult([r.to_json() for r in rows])
