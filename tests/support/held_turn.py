"""A router and daemon that hold one Turn open: a stream's tests feed its deltas by hand and
answer when they choose, to see what reaches the client in between."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ipc.delegation import DelegateAnswer
from orchestrator.router import DeltaSink


@dataclass
class HeldRouter:
    """Takes one request and keeps its sink; answers when told to."""

    sink: DeltaSink | None = None
    answer: asyncio.Future[DelegateAnswer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    async def request(self, text: str, **options: Any) -> DelegateAnswer:
        self.sink = options["on_delta"]
        self.asked.set()
        return await self.answer


@dataclass
class HeldDaemon:
    """What a request desk asks of the daemon, over a :class:`HeldRouter`."""

    router: HeldRouter
    stopping: bool = False

    async def request(self, text: str, **options: Any) -> DelegateAnswer:
        return await self.router.request(text, **options)
