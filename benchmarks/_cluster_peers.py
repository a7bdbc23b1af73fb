"""The far ends of ``benchmarks/cluster.py``, each run as its own process.

``python benchmarks/_cluster_peers.py responder URL SUBJECT``: answers every request on
SUBJECT with its own payload (the bare NATS request/reply floor).

``python benchmarks/_cluster_peers.py node URL BUNDLE NAME STATE_DIR HEARTBEAT``: a cluster
node whose agent processes are the benchmark's trivial echo agents instead of AgentProcesses.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def responder(url: str, subject: str) -> None:
    import nats

    client = await nats.connect(url)

    async def answer(msg: Any) -> None:
        await msg.respond(msg.data)

    await client.subscribe(subject, cb=answer)
    await client.flush()
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await client.close()


async def node(url: str, bundle: str, name: str, state_dir: str, heartbeat: str) -> None:
    from bundle import load_bundle
    from orchestrator.cluster.node import Node
    from orchestrator.cluster.settings import ClusterSettings
    from orchestrator.transport import MultiprocessingTransport

    swarm = load_bundle(Path(bundle), check_handlers=False).swarm().name
    settings = ClusterSettings(url, swarm, heartbeat_seconds=float(heartbeat), insecure=True)
    member = Node(
        Path(bundle),
        settings,
        name,
        state_dir=Path(state_dir),
        transport=MultiprocessingTransport(entry="benchmarks._ipc_agents:echo"),
    )
    member.install_signal_handlers()
    await member.start()
    print("ready", flush=True)
    await member.wait_stopped()
    await member.shutdown()


if __name__ == "__main__":
    from ipc.logs import configure_logging

    configure_logging("warning")
    role, *args = sys.argv[1:]
    uvloop.run(responder(*args) if role == "responder" else node(*args))
