"""Minimal agents for ``benchmarks/ipc.py``: our real Channel and messages, no model, no Turn.

Like the AgentProcess, they take messages straight from the channel's callback.
"""

from __future__ import annotations

import asyncio
import os
import time
from multiprocessing.connection import Connection
from typing import Any

import uvloop

from bundle.plan import AgentPlan
from ipc import (
    ORCHESTRATOR,
    Channel,
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    IpcMessage,
)
from ipc import protocol as wire

PAYLOAD: dict[str, Any] = {
    "target": "echo",
    "input": "summarise the latest build log please",
    "instanceKey": "default",
    "timeoutMs": 60000,
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "callChain": ["pinger@default"],
}


def echo(conn: Connection, plan: AgentPlan) -> None:
    """Answer every delegate at once (a trivial handler)."""

    async def main() -> None:
        name = plan.agent_name
        done = asyncio.Event()
        channel: Channel

        def on_message(message: IpcMessage) -> None:
            if isinstance(message, DelegateMessage):
                channel.send_nowait(
                    DelegateResultMessage(
                        sender=name,
                        to=message.sender,
                        correlation_id=message.correlation_id,
                        payload={"status": "ok", "output": message.payload.get("input")},
                    )
                )
            elif message.type == "shutdown":
                channel.send_nowait(wire.event(name, ORCHESTRATOR, wire.ShutdownAck()))
                done.set()

        channel = await Channel.open(conn, ORCHESTRATOR, on_message=on_message, on_close=done.set)
        channel.send_nowait(wire.event(name, ORCHESTRATOR, wire.Ready(os.getpid())))
        await done.wait()

    uvloop.run(main())


def pinger(conn: Connection, plan: AgentPlan) -> None:
    """On ``bench_start``, send ``count`` delegates to ``echo`` one after another; report times."""

    async def main() -> None:
        done = asyncio.Event()
        start: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        channel: Channel
        waiting: list[asyncio.Future[None]] = []
        samples: list[float] = []

        def on_message(message: IpcMessage) -> None:
            if isinstance(message, DelegateResultMessage):
                waiting.pop().set_result(None)
            elif isinstance(message, EventMessage) and message.kind == "bench_start":
                start.set_result(int(message.payload["count"]))
            elif message.type == "shutdown":
                channel.send_nowait(wire.event("pinger", ORCHESTRATOR, wire.ShutdownAck()))
                done.set()

        channel = await Channel.open(conn, ORCHESTRATOR, on_message=on_message, on_close=done.set)
        channel.send_nowait(wire.event("pinger", ORCHESTRATOR, wire.Ready(os.getpid())))
        loop = asyncio.get_running_loop()
        for n in range(await start):
            began = time.perf_counter()
            reply = loop.create_future()
            waiting.append(reply)
            channel.send_nowait(
                DelegateMessage(sender="pinger", to="echo", correlation_id=f"c{n}", payload=PAYLOAD)
            )
            await reply
            samples.append(time.perf_counter() - began)
        channel.send_nowait(
            EventMessage(
                sender="pinger", to=ORCHESTRATOR, payload={"kind": "bench_done", "samples": samples}
            )
        )
        await done.wait()

    uvloop.run(main())
