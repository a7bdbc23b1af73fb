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
