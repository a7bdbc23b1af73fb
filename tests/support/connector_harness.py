"""Run a connector's ``run(ctx)`` in this event loop with a context that records its events."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from tools_base import ConnectorEvent, TurnAnswer
from tools_base._connector import lookup_setting


class RecordingContext:
    """A :class:`~tools_base.ConnectorContext` whose ``emit`` queues events for the test.

    ``declared`` lists the event names the Connector declares (``None``: any name); a bounded
    ``capacity`` makes ``emit`` wait like the runtime's back-pressure does; ``state_dir`` is
    the Connection's state directory (``None``: the connector keeps its state in memory).
    """

    def __init__(
        self,
        *,
        connection_name: str = "test-connection",
        config: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        declared: set[str] | None = None,
        capacity: int = 0,
        state_dir: Path | None = None,
    ) -> None:
        self._name = connection_name
        self._state_dir = state_dir
        self._config = dict(config or {})
        self._secrets = dict(secrets or {})
        self.declared = declared
        self.events: asyncio.Queue[ConnectorEvent] = asyncio.Queue(capacity)
        self.awaiting: list[asyncio.Future[TurnAnswer]] = []
        """A future per event emitted with ``emit_awaiting_answer``: the test resolves it
        as the Turn's end."""
        self._logger: Any = structlog.get_logger("test.connector").bind(connection=connection_name)
        self.health: list[str | None] = []
        """What the connector reported: a failure's reason, or ``None`` for a success."""

    @property
    def connection_name(self) -> str:
        return self._name

    @property
    def config(self) -> Mapping[str, str]:
        return self._config

    @property
    def secrets(self) -> Mapping[str, str]:
        return self._secrets

    @property
    def logger(self) -> Any:
        return self._logger

    @property
    def state_dir(self) -> Path | None:
        return self._state_dir

    async def emit(self, event: ConnectorEvent) -> None:
        if self.declared is not None and event.name not in self.declared:
            raise ValueError(f"event {event.name!r} is not declared by the Connector")
        await self.events.put(event)

    async def accept(self, event: ConnectorEvent) -> bool:
        if self.declared is not None and event.name not in self.declared:
            raise ValueError(f"event {event.name!r} is not declared by the Connector")
        try:
            self.events.put_nowait(event)
        except asyncio.QueueFull:
            return False
        return True

    def report_failure(self, reason: str) -> None:
        self.health.append(reason)

    def report_success(self) -> None:
        self.health.append(None)

    def setting(self, *names: str, default: str | None = None) -> str | None:
        return lookup_setting(names, self._secrets, self._config, os.environ, default)

    async def next_event(self, seconds: float = 10.0) -> ConnectorEvent:
        """The next event emitted, waiting at most ``seconds``."""
        async with asyncio.timeout(seconds):
            return await self.events.get()

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> asyncio.Future[TurnAnswer]:
        await self.emit(event)
        future: asyncio.Future[TurnAnswer] = asyncio.get_running_loop().create_future()
        self.awaiting.append(future)
        return future
