"""Agent entry points for tests that need to reach into an agent's start (run in the child)."""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from bundle.plan import AgentPlan


def sigterm_while_starting(conn: Connection, plan: AgentPlan) -> None:
    """Serve as an agent does, receiving a SIGTERM after the agent has set its own signal
    dispositions and before its event loop runs: the window a group's SIGTERM may hit."""
    import agent_process.main as agent_main

    configure_logging = agent_main.configure_logging

    def configure_then_sigterm(*args: Any, **kwargs: Any) -> None:
        configure_logging(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    agent_main.configure_logging = configure_then_sigterm
    agent_main.serve(conn, plan)


def ready_until_closed(conn: Connection, plan: AgentPlan) -> None:
    """Report ready on the channel, answer a shutdown, exit when the pipe closes: a process
    the supervisor and transport can drive with no agent runtime behind it."""
    import asyncio

    from ipc import ORCHESTRATOR, Channel, build
    from ipc.events import Ready, ShutdownAck

    async def main() -> None:
        done = asyncio.Event()
        channel: Channel

        def on_message(message: Any) -> None:
            if message.type == "shutdown":
                channel.send_nowait(build.event(plan.agent_name, ORCHESTRATOR, ShutdownAck()))
                done.set()

        channel = await Channel.open(conn, ORCHESTRATOR, on_message=on_message, on_close=done.set)
        channel.send_nowait(build.event(plan.agent_name, ORCHESTRATOR, Ready(os.getpid())))
        await done.wait()
        await channel.flush()

    asyncio.run(main())
