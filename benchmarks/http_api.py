"""The HTTP API's request → answer round trip, against the same request without HTTP.

The offline example swarm (``goondan.yaml.example``: a handoff from ``coordinator`` to
``worker``, which writes a file) answers, one request at a time:

1. in process: ``Orchestrator.request`` called directly, the control path under every front
   door (router → agent pipes → Turn → answer), with no HTTP at all: the baseline
2. the CLI's path: a new connection to ``api.sock`` per request (``DaemonApi``)
3. the HTTP API over its Unix socket, one keep-alive connection
4. the HTTP API over TCP loopback, one keep-alive connection

(2–4 against a daemon process, taking turns, each on its own conversation instance.)

Every answer is checked. Run: ``python benchmarks/http_api.py [--count N] [--json] [--quick]``
(``--quick``: 10 requests per path, for CI). Prints figures; gates nothing.
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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

import httpx2  # noqa: E402

from benchmarks._checks import expect  # noqa: E402
from ipc.logs import configure_logging  # noqa: E402
from orchestrator.api_client import DaemonApi  # noqa: E402
from orchestrator.daemon import Orchestrator  # noqa: E402

TEXT = "write notes.txt hello world"
ANSWER = "Done. The worker reports: wrote 11 bytes to notes.txt"
"""What the example swarm answers to :data:`TEXT`: every request's answer is checked."""
WARM_UP = 5
"""Requests per path first, not counted: they start agents, create files, open connections."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def timed(call: Callable[[], None], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"median_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000}


def in_process(count: int) -> list[float]:
    """The baseline: the same request through an Orchestrator in this process, no HTTP."""

    async def run() -> list[float]:
        configure_logging("warning", process="benchmark")
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            shutil.copy(ROOT / "goondan.yaml.example", directory / "goondan.yaml")
            orchestrator = Orchestrator(directory / "goondan.yaml")
            await orchestrator.start()
            try:
                samples = []
                for index in range(count + WARM_UP):
                    started = time.perf_counter()
                    answer = await orchestrator.request(TEXT, agent="coordinator", instance_key="i")
                    expect(answer.ok and answer.output == ANSWER, answer)
                    if index >= WARM_UP:
                        samples.append(time.perf_counter() - started)
                return samples
            finally:
                await orchestrator.shutdown()

    try:  # the loop the daemon runs on
        import uvloop

        return uvloop.run(run())
    except ImportError:
        return asyncio.run(run())


def measure(count: int) -> dict[str, Any]:
    baseline = in_process(count)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        shutil.copy(ROOT / "goondan.yaml.example", directory / "goondan.yaml")
        port = free_port()
        daemon = subprocess.Popen(
            [
                *(sys.executable, "-m", "orchestrator", "run", "goondan.yaml"),
                *("--listen", f"127.0.0.1:{port}", "--log-level", "warning"),
            ],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        state = directory / ".goondan"
        try:
            unix = httpx2.Client(
                transport=httpx2.HTTPTransport(uds=str(state / "api.sock")),
                base_url="http://goondan",
                timeout=60,
            )
            tcp = httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
            deadline = time.monotonic() + 60
            while True:
                try:
                    if unix.get("/readyz").status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the daemon did not become ready")
                time.sleep(0.05)

            # Each path has its own conversation and the calls take turns, so the history
            # every Turn reads grows alike on every path.
            cli_api = DaemonApi(state)

            def over_cli_client() -> None:
                body = {"input": TEXT, "instanceKey": "c"}
                status, answer = cli_api.call("POST", "/v1/agents/coordinator/requests", body)
                expect(status == 200 and answer.get("output") == ANSWER, (status, answer))

            def over(client: httpx2.Client, key: str) -> Callable[[], None]:
                body = {"input": TEXT, "instanceKey": key}

                def call() -> None:
                    answer = client.post("/v1/agents/coordinator/requests", json=body)
                    right = answer.status_code == 200 and answer.json().get("output") == ANSWER
                    expect(right, answer.text)

                return call

            paths = {
                "cli_client_unix_socket": over_cli_client,
                "http_unix_socket": over(unix, "u"),
                "http_tcp_loopback": over(tcp, "t"),
            }
            for call in paths.values():
                timed(call, WARM_UP)
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(count):
                for name, call in paths.items():
                    samples[name] += timed(call, 1)
            figures = {"in_process": summary(baseline)}
            figures |= {name: summary(taken) for name, taken in samples.items()}
            unix.close()
            tcp.close()
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    control = figures["in_process"]["median_ms"]
    for name in ("cli_client_unix_socket", "http_unix_socket", "http_tcp_loopback"):
        figures[name]["ratio_to_in_process"] = figures[name]["median_ms"] / control
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="10 requests per path, for CI")
    options = parser.parse_args()
    if options.quick:
        options.count = 10
    figures = measure(options.count)
    if options.json:
        print(json.dumps(figures))
        return
    print(f"request → answer ({TEXT!r}, handoff + file write), {options.count} requests")
    print(f"{'path':<24} {'median ms':>10} {'p99 ms':>9} {'vs in process':>14}")
    for name, row in figures.items():
        ratio = f"{row['ratio_to_in_process']:.2f}x" if "ratio_to_in_process" in row else ""
        print(f"{name:<24} {row['median_ms']:>10.2f} {row['p99_ms']:>9.2f} {ratio:>14}")


if __name__ == "__main__":
    main()
