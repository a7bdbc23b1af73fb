"""An agent for ``benchmarks/permits.py`` that asks for permits and does nothing else.

It speaks the real channel and the real ``model_permit`` / ``model_usage`` events, as the
governor of an AgentProcess does, but has no model and no Turn: a request whose input is
``"<pool> <count> <estimated tokens>"`` makes it ask the Orchestrator for ``count`` permits of
``pool`` one after another, each returned at once with a usage report, and answer with the
seconds each grant took to arrive.
"""

from __future__ import annotations

import asyncio
import time
from multiprocessing.connection import Connection

import uvloop

from benchmarks._ipc_agents import serve
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
from ipc import protocol as wire
from ipc.events import ModelUsage, read_event
from ipc.payload import EventBody
from ipc.questions import ModelPermitRequest, ModelPermitResult

WAIT_MS = 60_000
OUTPUT_TOKENS = 7


def probe(conn: Connection, plan: AgentPlan) -> None:
    """The entry of the probe agent's process."""

    async def main() -> None:
        name = plan.agent_name
        loop = asyncio.get_running_loop()
        waiting: dict[str, asyncio.Future[EventBody]] = {}
        running: set[asyncio.Task[None]] = set()

        async def permits(channel: Channel, message: DelegateMessage) -> None:
            pool, count, estimate = str(message.payload["input"]).split()
            trace_id = str(message.payload.get("traceId") or wire.new_trace_id())
            samples: list[float] = []
            for n in range(int(count)):
                correlation_id = f"{message.correlation_id}-{n}"
                question = ModelPermitRequest(
                    pool, trace_id, wire.DEFAULT_INSTANCE_KEY, int(estimate), WAIT_MS
                )
                answer: asyncio.Future[EventBody] = loop.create_future()
                waiting[correlation_id] = answer
                began = time.perf_counter()
                channel.send_nowait(build.event(name, ORCHESTRATOR, question, correlation_id))
                result = await answer
                samples.append(time.perf_counter() - began)
                if not isinstance(result, ModelPermitResult) or not result.granted:
                    # Not assert (``-O`` skips it): the benchmark's check sees this answer.
                    refusal = {"message": f"permit not granted: {result!r}", "code": "E_BENCH"}
                    channel.send_nowait(
                        DelegateResultMessage(
                            sender=name,
                            to=message.sender,
                            correlation_id=message.correlation_id,
                            payload={"status": "error", "error": refusal},
                        )
                    )
                    return
                usage = ModelUsage(
                    trace_id,
                    wire.DEFAULT_INSTANCE_KEY,
                    correlation_id,
                    pool,
                    int(estimate),
                    OUTPUT_TOKENS,
                    0.0,
                )
                channel.send_nowait(build.event(name, ORCHESTRATOR, usage))
            channel.send_nowait(
                DelegateResultMessage(
                    sender=name,
                    to=message.sender,
                    correlation_id=message.correlation_id,
                    payload={"status": "ok", "output": samples},
                )
            )

        def on_message(channel: Channel, message: IpcMessage) -> None:
            if isinstance(message, EventMessage) and message.correlation_id in waiting:
                waiting.pop(message.correlation_id).set_result(read_event(message))
            elif isinstance(message, DelegateMessage):
                task = loop.create_task(permits(channel, message))
                running.add(task)
                task.add_done_callback(running.discard)

        await serve(conn, name, on_message)

    uvloop.run(main())
