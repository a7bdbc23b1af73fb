"""What durable requests cost a Turn: the request recorded (synced) before it is accepted and
its answer after, an ``Idempotency-Key``, a resumable stream, against the same request with its
record kept in memory only (what the API did before requests were durable).

The offline example swarm (``goondan.yaml.example``) runs in this process on a loop thread;
each path is one ``POST /v1/agents/coordinator/requests`` served by the daemon's own ASGI app
(through httpx's ASGI transport, timed on the daemon's loop, so no socket is counted):

1. ``in_process``: ``Orchestrator.request``, no HTTP, no record: the floor of every path
2. ``memory``: the API with its request desk keeping records in memory only (the "without")
3. ``durable``: the API as the daemon serves it: records in ``<state>/requests/``
4. ``durable_key``: the same with a fresh ``Idempotency-Key`` per request
5. ``durable_key_stream``: the same streamed (``"stream": true``; ids on each event), to the
   answer event

Each path takes its turn in every round (load on a shared machine falls on all alike). Each
reports its median and p99, ``added_ms``/``added_pct`` over ``memory``, and ``cpu_ms``: the
daemon process's CPU time per request (the agents' own processes are not counted; their work
does not change). Every answer is checked.

Run: ``python benchmarks/durable_requests.py [--count N] [--json] [--quick]`` (``--quick``: 10
requests per path, for CI). Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

import httpx2  # noqa: E402

from benchmarks._checks import expect  # noqa: E402
from benchmarks.http_api import ANSWER, PAUSE_SECONDS, REQUESTS, TEXT, WARM_UP, InProcess  # noqa: E402
from ipc.logs import configure_logging  # noqa: E402
from orchestrator.callers import Peer, with_peer  # noqa: E402
from orchestrator.http.app import build_app  # noqa: E402
from orchestrator.requests import RequestDesk, RequestStore  # noqa: E402


def recorded(directory: Path) -> int:
    """How many requests the journal in ``directory`` holds (each its last line)."""
    ids = {
        json.loads(line)["requestId"]
        for segment in directory.glob("journal-*.jsonl")
        for line in segment.read_text().splitlines()
    }
    return len(ids)


PATHS = ("in_process", "memory", "durable", "durable_key", "durable_key_stream")


class Paths:
    """The timed requests, each run on the daemon's loop."""

    def __init__(self, swarm: InProcess) -> None:
        import os
        import socket

        self.swarm = swarm
        orchestrator = swarm.orchestrator
        peer = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())

        def client(desk: RequestDesk) -> httpx2.AsyncClient:
            app = with_peer(build_app(orchestrator.operations, desk=desk), peer)
            transport = httpx2.ASGITransport(app=app)
            return httpx2.AsyncClient(transport=transport, base_url="http://goondan", timeout=60)

        async def made() -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
            memory = RequestDesk(orchestrator.operations, RequestStore(None))
            return client(memory), client(orchestrator.requests)

        self.memory, self.durable = swarm.run(made())

    def timed(self, path: str) -> tuple[float, float]:
        """One request on ``path``: ``(seconds, daemon CPU seconds)``."""

        async def once() -> tuple[float, float]:
            cpu, started = time.process_time(), time.perf_counter()
            await self._request(path)
            return time.perf_counter() - started, time.process_time() - cpu

        result: tuple[float, float] = self.swarm.run(once())
        return result

    async def _request(self, path: str) -> None:
        if path == "in_process":
            answer = await self.swarm.orchestrator.request(
                TEXT, agent="coordinator", instance_key=path
            )
            expect(answer.ok and answer.output == ANSWER, answer)
            return
        client = self.memory if path == "memory" else self.durable
        body: dict[str, Any] = {"input": TEXT, "instanceKey": path}
        headers = {"Idempotency-Key": uuid.uuid4().hex} if "key" in path else {}
        if path.endswith("stream"):
            body["stream"] = True
            async with client.stream("POST", REQUESTS, json=body, headers=headers) as response:
                text = (await response.aread()).decode()
            expect("id: answer\nevent: answer" in text and ANSWER in text, text[-300:])
            return
        response = await client.post(REQUESTS, json=body, headers=headers)
        expect(response.status_code == 200 and response.json()["output"] == ANSWER, response.text)

    def close(self) -> None:
        async def closed() -> None:
            await self.memory.aclose()
            await self.durable.aclose()

        self.swarm.run(closed())


def summary(samples: list[float], cpu: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": p99 * 1000,
        "cpu_ms": statistics.mean(cpu) * 1000,
    }


def measure(count: int) -> dict[str, Any]:
    configure_logging(level="warning")
    with tempfile.TemporaryDirectory(prefix="goondan-durable-") as scratch:
        swarm = InProcess(Path(scratch))
        paths = Paths(swarm)
        try:
            times: dict[str, list[float]] = {p: [] for p in PATHS}
            cpus: dict[str, list[float]] = {p: [] for p in PATHS}
            for round_number in range(WARM_UP + count):
                for path in PATHS:
                    seconds, cpu = paths.timed(path)
                    time.sleep(PAUSE_SECONDS)
                    if round_number >= WARM_UP:
                        times[path].append(seconds)
                        cpus[path].append(cpu)
            records = recorded(Path(scratch) / ".goondan" / "requests")
        finally:
            paths.close()
            swarm.close()
    figures: dict[str, Any] = {"count": count, "records_on_disk": records}
    for path in PATHS:
        figures[path] = summary(times[path], cpus[path])
    without = figures["memory"]["median_ms"]
    for path in ("durable", "durable_key", "durable_key_stream"):
        row = figures[path]
        row["added_ms"] = row["median_ms"] - without
        row["added_pct"] = 100 * row["added_ms"] / without
        row["added_cpu_ms"] = row["cpu_ms"] - figures["memory"]["cpu_ms"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--quick", action="store_true", help="10 requests per path, for CI")
    args = parser.parse_args()
    figures = measure(10 if args.quick else args.count)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{figures['count']} requests per path; {figures['records_on_disk']} records on disk")
    for path in PATHS:
        row = figures[path]
        extra = ""
        if "added_ms" in row:
            extra = (
                f"  +{row['added_ms']:.2f} ms ({row['added_pct']:+.1f} %), "
                f"cpu +{row['added_cpu_ms']:.2f} ms"
            )
        print(
            f"{path:>20}: median {row['median_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms, "
            f"cpu {row['cpu_ms']:.2f} ms{extra}"
        )


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
