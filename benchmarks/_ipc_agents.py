"""Minimal agents for ``benchmarks/ipc.py``: our real Channel and messages, no model, no Turn.

Like the AgentProcess, they take messages straight from the channel's callback.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
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
    build,
)
from ipc.events import Ready, ShutdownAck

PAYLOAD: dict[str, Any] = {
    "target": "echo",
    "input": "summarise the latest build log please",
    "instanceKey": "default",
    "timeoutMs": 60000,
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "callChain": ["pinger@default"],
}


async def serve(
    conn: Connection,
    name: str,
    on_message: Callable[[Channel, IpcMessage], None],
    after_ready: Callable[[Channel], Awaitable[None]] | None = None,
) -> None:
    """The life of a benchmark agent: open the channel, say ready, run ``after_ready`` if given,
    and serve until ``shutdown`` (acknowledged) or the pipe closes. Every other message goes to
    ``on_message``, straight from the channel's callback as in the AgentProcess."""
    done = asyncio.Event()
    channel: Channel

    def receive(message: IpcMessage) -> None:
        if message.type == "shutdown":
            channel.send_nowait(build.event(name, ORCHESTRATOR, ShutdownAck()))
            done.set()
        else:
            on_message(channel, message)

    channel = await Channel.open(conn, ORCHESTRATOR, on_message=receive, on_close=done.set)
    channel.send_nowait(build.event(name, ORCHESTRATOR, Ready(os.getpid())))
    if after_ready is not None:
        await after_ready(channel)
    await done.wait()


def echo(conn: Connection, plan: AgentPlan) -> None:
    """Answer every delegate at once (a trivial handler)."""
    name = plan.agent_name

    def on_message(channel: Channel, message: IpcMessage) -> None:
        if isinstance(message, DelegateMessage):
            channel.send_nowait(
                DelegateResultMessage(
                    sender=name,
                    to=message.sender,
                    correlation_id=message.correlation_id,
                    payload={"status": "ok", "output": message.payload.get("input")},
                )
            )

    uvloop.run(serve(conn, name, on_message))


def pinger(conn: Connection, plan: AgentPlan) -> None:
    """On ``bench_start``, send ``count`` delegates to ``echo`` one after another; report times,
    and the first wrong answers if there were any."""

    async def main() -> None:
        start: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiting: list[asyncio.Future[None]] = []

        wrong: list[dict[str, Any]] = []

        def on_message(channel: Channel, message: IpcMessage) -> None:
            if isinstance(message, DelegateResultMessage):
                # echo answers with the delegate's input: anything else is a wrong answer.
                answer = message.payload
                if answer.get("status") != "ok" or answer.get("output") != PAYLOAD["input"]:
                    wrong.append(answer)
                waiting.pop().set_result(None)
            elif isinstance(message, EventMessage) and message.kind == "bench_start":
                start.set_result(int(message.payload["count"]))

        async def ping(channel: Channel) -> None:
            loop = asyncio.get_running_loop()
            samples: list[float] = []
            for n in range(await start):
                began = time.perf_counter()
                reply = loop.create_future()
                waiting.append(reply)
                channel.send_nowait(
                    DelegateMessage(
                        sender="pinger", to="echo", correlation_id=f"c{n}", payload=PAYLOAD
                    )
                )
                await reply
                samples.append(time.perf_counter() - began)
            channel.send_nowait(
                EventMessage(
                    sender="pinger",
                    to=ORCHESTRATOR,
                    payload={"kind": "bench_done", "samples": samples, "wrong": wrong[:3]},
                )
            )

        await serve(conn, "pinger", on_message, ping)

    uvloop.run(main())
