"""Minimal agents for ``benchmarks/ipc.py``: our real Channel and messages, no model, no Turn."""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from typing import Any

import uvloop

from ipc import ORCHESTRATOR, Channel, DelegateMessage, DelegateResultMessage, EventMessage, event

PAYLOAD: dict[str, Any] = {
    "target": "echo",
    "input": "summarise the latest build log please",
    "instanceKey": "default",
    "timeoutMs": 60000,
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "callChain": ["pinger@default"],
}


def echo(conn: Connection, plan: dict[str, Any]) -> None:
    """Answer every delegate at once (a trivial handler)."""

    async def main() -> None:
        channel = await Channel.open(conn, ORCHESTRATOR)
        name = plan["name"]
        channel.send_nowait(event(name, ORCHESTRATOR, "ready", pid=os.getpid()))
        async for message in channel:
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
                channel.send_nowait(event(name, ORCHESTRATOR, "shutdown_ack"))
                return

    uvloop.run(main())


def pinger(conn: Connection, plan: dict[str, Any]) -> None:
    """On ``bench_start``, send ``count`` delegates to ``echo`` one after another; report times."""

    async def main() -> None:
        channel = await Channel.open(conn, ORCHESTRATOR)
        channel.send_nowait(event("pinger", ORCHESTRATOR, "ready", pid=os.getpid()))
        async for message in channel:
            if isinstance(message, EventMessage) and message.kind == "bench_start":
                samples = []
                for n in range(int(message.payload["count"])):
                    started = time.perf_counter()
                    channel.send_nowait(
                        DelegateMessage(
                            sender="pinger", to="echo", correlation_id=f"c{n}", payload=PAYLOAD
                        )
                    )
                    reply = await channel.receive()
                    assert isinstance(reply, DelegateResultMessage), reply
                    samples.append(time.perf_counter() - started)
                channel.send_nowait(event("pinger", ORCHESTRATOR, "bench_done", samples=samples))
            elif message.type == "shutdown":
                channel.send_nowait(event("pinger", ORCHESTRATOR, "shutdown_ack"))
                return

    uvloop.run(main())
