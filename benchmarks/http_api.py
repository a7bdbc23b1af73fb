"""The HTTP API's request → answer round trip, against the same request over the control socket.

A real daemon runs the offline example swarm (``goondan.yaml.example``: a handoff from
``coordinator`` to ``worker``, which writes a file). In the same run, one request at a time:

1. the control socket, as the CLI uses it (one connection per request, a JSON line each way)
2. the HTTP API over its Unix socket, one keep-alive connection
3. the HTTP API over TCP loopback, one keep-alive connection

taking turns, each on its own conversation instance.

Run: ``python benchmarks/http_api.py [--count N] [--json]``. Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
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

from orchestrator.control import control_request  # noqa: E402

TEXT = "write notes.txt hello world"


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


def measure(count: int) -> dict[str, Any]:
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
            def over_control() -> None:
                request = {"cmd": "send", "agent": "coordinator", "text": TEXT, "instance": "c"}
                assert control_request(state, request)["ok"]

            def over(client: httpx2.Client, key: str) -> Callable[[], None]:
                body = {"input": TEXT, "instanceKey": key}

                def call() -> None:
                    answer = client.post("/v1/agents/coordinator/requests", json=body)
                    assert answer.status_code == 200, answer.text

                return call

            paths = {
                "control_socket": over_control,
                "http_unix_socket": over(unix, "u"),
                "http_tcp_loopback": over(tcp, "t"),
            }
            for call in paths.values():
                timed(call, 5)  # warm up: agents, files, connections
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(count):
                for name, call in paths.items():
                    samples[name] += timed(call, 1)
            figures = {name: summary(taken) for name, taken in samples.items()}
            unix.close()
            tcp.close()
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    control = figures["control_socket"]["median_ms"]
    for name in ("http_unix_socket", "http_tcp_loopback"):
        figures[name]["ratio_to_control"] = figures[name]["median_ms"] / control
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    options = parser.parse_args()
    figures = measure(options.count)
    if options.json:
        print(json.dumps(figures))
        return
    print(f"request → answer ({TEXT!r}, handoff + file write), {options.count} requests")
    print(f"{'path':<24} {'median ms':>10} {'p99 ms':>9} {'vs control':>11}")
    for name, row in figures.items():
        ratio = f"{row['ratio_to_control']:.2f}x" if "ratio_to_control" in row else ""
        print(f"{name:<24} {row['median_ms']:>10.2f} {row['p99_ms']:>9.2f} {ratio:>11}")


if __name__ == "__main__":
    main()
