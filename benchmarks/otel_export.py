"""What exporting spans costs the daemon: the same handoffs with OpenTelemetry export off, on
(a collector that accepts everything), and towards a port nobody listens on.

The offline example swarm (``goondan.yaml.example``: ``coordinator`` hands ``write FILE TEXT``
to ``worker``; 8 spans per request) runs as a daemon process per setting. Through its Unix
socket, on keep-alive connections, it answers first one request at a time (latency), then
``--concurrency`` callers at once (throughput); the Orchestrator process's own CPU time per
request is read from ``/proc``. The collector is an OTLP/HTTP server in this process that
counts the spans it decodes, so none of its work lands on the daemon.

Run: ``python benchmarks/otel_export.py [--count N] [--concurrency C] [--rounds R] [--json]``
(needs the ``otel`` extra; ``--quick``: small counts, one round, for CI). The settings take
turns for ``--rounds`` rounds; it prints each figure's median over the rounds and its ratio to
export off. Every answer is checked. Gates nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

import httpx2  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

from benchmarks._checks import expect  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
ANSWER = "Done. The worker reports: wrote 11 bytes to notes.txt"
"""What the example swarm answers to every request here: each answer is checked."""


class Collector:
    """Accepts every export and counts the spans in it."""

    def __init__(self) -> None:
        self.spans = 0
        lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                count = sum(
                    len(scope.spans)
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                )
                with lock:
                    collector.spans += count
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def measure(
    args: list[str], env: dict[str, str], count: int, concurrency: int
) -> dict[str, float]:
    directory = Path(tempfile.mkdtemp(prefix="goondan-otel-bench-"))
    shutil.copy(ROOT / "goondan.yaml.example", directory / "goondan.yaml")
    daemon = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is measured
        [
            sys.executable,
            "-m",
            "orchestrator",
            "run",
            "goondan.yaml",
            "--log-level",
            "warning",
            *args,
        ],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, **env},
    )
    socket_path = directory / ".goondan" / "api.sock"
    try:
        transport = httpx2.AsyncHTTPTransport(uds=str(socket_path))
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://goondan", timeout=60
        ) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the daemon did not become ready")
                await asyncio.sleep(0.05)

            async def ask(key: str) -> float:
                started = time.perf_counter()
                answer = await http.post(
                    "/v1/agents/coordinator/requests",
                    json={"input": "write notes.txt hello world", "instanceKey": key},
                )
                took = time.perf_counter() - started
                right = answer.status_code == 200 and answer.json().get("output") == ANSWER
                expect(right, answer.text)
                return took

            for _ in range(min(20, count)):  # warm up: the worker starts, the instances exist
                await ask("k0")
            cpu_before = cpu_seconds(daemon.pid)
            samples = [await ask("k0") for _ in range(count)]
            cpu_serial = cpu_seconds(daemon.pid) - cpu_before

            async def caller(key: str, requests: int) -> None:
                for _ in range(requests):
                    await ask(key)

            per_caller = max(1, count // concurrency)
            cpu_before = cpu_seconds(daemon.pid)
            started = time.perf_counter()
            await asyncio.gather(*(caller(f"k{i}", per_caller) for i in range(concurrency)))
            elapsed = time.perf_counter() - started
            cpu_parallel = cpu_seconds(daemon.pid) - cpu_before
    finally:
        daemon.send_signal(signal.SIGTERM)
        stop_began = time.monotonic()
        daemon.wait(timeout=60)
        stop = time.monotonic() - stop_began
        shutil.rmtree(directory, ignore_errors=True)
    samples.sort()
    total = per_caller * concurrency
    return {
        "median_ms": statistics.median(samples) * 1000,
        "p99_ms": samples[int(len(samples) * 0.99) - 1] * 1000,
        "cpu_ms_per_request": (cpu_serial + cpu_parallel) / (count + total) * 1000,
        "requests_per_s": total / elapsed,
        "stop_s": stop,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="requests per phase")
    parser.add_argument("--concurrency", type=int, default=16, help="callers at once")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every setting, taking turns (medians)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small counts, one round, for CI")
    options = parser.parse_args()
    if options.quick:
        options.count, options.concurrency, options.rounds = 10, 4, 1
    collector = Collector()
    fast = {"OTEL_BSP_SCHEDULE_DELAY": "200"}
    settings = {
        "off": ([], {}),
        "on": (["--otlp-endpoint", collector.url], fast),
        "unreachable": (["--otlp-endpoint", f"http://127.0.0.1:{closed_port()}"], fast),
    }
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    try:
        for _ in range(options.rounds):
            for name, (args, env) in settings.items():
                rounds[name].append(await measure(args, env, options.count, options.concurrency))
    finally:
        collector.close()
    results = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in rounds.items()
    }
    results["on"]["spans_received"] = collector.spans
    base = results["off"]
    for row in results.values():
        for key in ("median_ms", "cpu_ms_per_request", "requests_per_s"):
            row[f"{key}_vs_off"] = row[key] / base[key]
    if options.json:
        print(json.dumps(results))
        return
    print(
        f"{'export':<12} {'median ms':>10} {'p99 ms':>8} {'CPU ms/req':>11} {'req/s':>8} "
        f"{'stop s':>7}   vs off: median, CPU, req/s"
    )
    for name, row in results.items():
        print(
            f"{name:<12} {row['median_ms']:>10.2f} {row['p99_ms']:>8.2f} "
            f"{row['cpu_ms_per_request']:>11.3f} {row['requests_per_s']:>8.0f} "
            f"{row['stop_s']:>7.2f}   {row['median_ms_vs_off']:.2f}, "
            f"{row['cpu_ms_per_request_vs_off']:.2f}, {row['requests_per_s_vs_off']:.2f}"
        )
    print(f"spans received by the collector: {int(results['on']['spans_received'])}")


if __name__ == "__main__":
    asyncio.run(main())
