"""The HTTP API's request → answer round trip, against the same request without HTTP, and
against the floor any HTTP server on our stack pays.

The offline example swarm (``goondan.yaml.example``: a handoff from ``coordinator`` to
``worker``, which writes a file) answers, one request at a time:

1. in process: ``Orchestrator.request`` called directly, the control path under every front
   door (router → agent pipes → Turn → answer), with no HTTP at all: the baseline. Also the
   time to the first streamed text delta, the baseline of a streamed answer's first chunk
2. the CLI's path: a new connection to ``api.sock`` per request (``DaemonApi``)
3. the HTTP API over its Unix socket and over TCP loopback, one keep-alive connection each:
   ``POST /v1/agents/{agent}/requests``, ``POST /v1/chat/completions``, and the same streamed
   (time to the first chunk); and over TCP the front doors (``benchmarks/_front_doors.py``):
   the Responses API, MCP ``tools/call``, A2A ``SendMessage``, an AG-UI run, each with
   ``over_api_ms``, its median less ``POST .../requests``'s (target: at most 0.3 ms)
4. the floor: a bare Starlette app on uvicorn (``benchmarks/_http_floor.py``, its own process)
   answering the bytes the daemon answered, over the same client and the same transports, on
   the same HTTP/1.1 parser (``parsers`` in the JSON names the daemon's and the floor's)

The in-process Orchestrator runs on a loop thread of this process and is timed on that loop;
every path, the in-process ones included, takes its turn in each round, so load on a shared
machine falls on all of them alike, and each request starts with the swarms idle
(:data:`PAUSE_SECONDS`). Each HTTP path reports ``added_ms``, its median less the
in-process median (the cost of the front door), beside ``floor_ms``, the floor's median over
the same transport; ``over_floor_ms`` is what is ours. Each path through the daemon also
reports ``daemon_cpu_ms``, the daemon process's CPU time while its requests ran (clock ticks,
summed over them all), which the machine's load does not inflate as it does the medians; each
front door ``over_api_cpu_ms``, its CPU less ``POST .../requests``'s. Every answer is checked.

Run: ``python benchmarks/http_api.py [--count N] [--json] [--quick]`` (``--quick``: 10
requests per path, for CI). Prints figures; gates nothing.
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
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

import httpx2  # noqa: E402
import uvloop  # noqa: E402

from benchmarks._checks import expect  # noqa: E402
from benchmarks._front_doors import DOORS  # noqa: E402
from goondan.http_server import http_parser  # noqa: E402
from ipc.logs import configure_logging  # noqa: E402
from orchestrator.daemon import Orchestrator  # noqa: E402
from orchestrator.http.client import DaemonApi  # noqa: E402

TEXT = "write notes.txt hello world"
ANSWER = "Done. The worker reports: wrote 11 bytes to notes.txt"
"""What the example swarm answers to :data:`TEXT`: every request's answer is checked."""
WARM_UP = 5
"""Requests per path first, not counted: they start agents, create files, open connections."""
PAUSE_SECONDS = 0.01
"""Between two requests, not timed: a Turn's work after its answer (the conversation written
out) is over before the next request, whichever path it takes. Without it the first path of
a round to reach the daemon finds its agents idle and the next ones do not."""
REQUESTS = "/v1/agents/coordinator/requests"
CHAT = "/v1/chat/completions"
TRANSPORTS = ("unix_socket", "tcp_loopback")

Call = Callable[[], float]
"""One timed request: checks its answer, returns the seconds it took."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return {"median_ms": median * 1000, "p99_ms": p99 * 1000, "p99_to_median": p99 / median}


def chat_body(stream: bool) -> dict[str, Any]:
    return {
        "model": "coordinator",
        "messages": [{"role": "user", "content": TEXT}],
        "stream": stream,
    }


class _ThreadLoop(uvloop.Loop):
    """uvloop on a thread other than the main one: no signal handler can be installed there,
    so removing one (as ``Orchestrator.shutdown`` does) has nothing to do."""

    def remove_signal_handler(self, sig: int) -> bool:
        return False


class InProcess:
    """An Orchestrator of the example swarm on a loop thread of this process, no HTTP: each
    call is timed on that loop, so handing it over from this thread is not counted."""

    def __init__(self, directory: Path) -> None:
        shutil.copy(ROOT / "goondan.yaml.example", directory / "goondan.yaml")
        self.loop = _ThreadLoop()  # the loop the daemon runs on
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def started() -> Orchestrator:
            orchestrator = Orchestrator.from_bundle(directory / "goondan.yaml")
            await orchestrator.start()
            return orchestrator

        self.orchestrator: Orchestrator = self.run(started())

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        done: Future[Any] = asyncio.run_coroutine_threadsafe(work, self.loop)
        return done.result(120)

    def request(self) -> float:
        async def timed() -> float:
            started = time.perf_counter()
            answer = await self.orchestrator.request(TEXT, agent="coordinator", instance_key="i")
            taken = time.perf_counter() - started
            expect(answer.ok and answer.output == ANSWER, answer)
            return taken

        seconds: float = self.run(timed())
        return seconds

    def first_delta(self) -> float:
        """Time to the first streamed text delta of a request (then its answer is awaited)."""

        async def timed() -> float:
            first = asyncio.Event()
            started = time.perf_counter()
            taken = 0.0

            def on_delta(agent: str, delta: Any) -> None:
                nonlocal taken
                if not first.is_set():
                    taken = time.perf_counter() - started
                    first.set()

            answer = await self.orchestrator.router.request(
                "coordinator", TEXT, instance_key="s", on_delta=on_delta
            )
            expect(answer.ok and answer.output == ANSWER and first.is_set(), answer)
            return taken

        seconds: float = self.run(timed())
        return seconds

    def close(self) -> None:
        self.run(self.orchestrator.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)


def wait_ready(client: httpx2.Client) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon did not become ready")
        time.sleep(0.05)


def clients(port: int, sock: Path) -> dict[str, httpx2.Client]:
    return {
        "unix_socket": httpx2.Client(
            transport=httpx2.HTTPTransport(uds=str(sock)), base_url="http://goondan", timeout=60
        ),
        "tcp_loopback": httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=60),
    }


def requesting(client: httpx2.Client, key: str) -> Call:
    body = {"input": TEXT, "instanceKey": key}

    def call() -> float:
        started = time.perf_counter()
        answer = client.post(REQUESTS, json=body)
        taken = time.perf_counter() - started
        expect(answer.status_code == 200 and answer.json().get("output") == ANSWER, answer.text)
        return taken

    return call


def chatting(client: httpx2.Client, key: str) -> Call:
    body, headers = chat_body(False), {"x-goondan-instance": key}

    def call() -> float:
        started = time.perf_counter()
        answer = client.post(CHAT, json=body, headers=headers)
        taken = time.perf_counter() - started
        right = answer.status_code == 200
        expect(right and answer.json()["choices"][0]["message"]["content"] == ANSWER, answer.text)
        return taken

    return call


def first_chunk(client: httpx2.Client, key: str) -> Call:
    """Time to the first chunk of a streamed chat completion (the rest is read, not timed)."""
    body, headers = chat_body(True), {"x-goondan-instance": key}

    def call() -> float:
        started = time.perf_counter()
        with client.stream("POST", CHAT, json=body, headers=headers) as answer:
            chunks = answer.iter_bytes()
            head = next(chunks)
            taken = time.perf_counter() - started
            text = head + b"".join(chunks)
        expect(answer.status_code == 200 and text.endswith(b"data: [DONE]\n\n"), text[-200:])
        expect(b"chat.completion.chunk" in head, head)
        return taken

    return call


def canned_answers(client: httpx2.Client) -> dict[str, Any]:
    """The daemon's own answers, for the floor to answer the same bytes."""
    request = client.post(REQUESTS, json={"input": TEXT, "instanceKey": "canned"}).json()
    headers = {"x-goondan-instance": "canned"}
    chat = client.post(CHAT, json=chat_body(False), headers=headers).json()
    with client.stream("POST", CHAT, json=chat_body(True), headers=headers) as answer:
        text = answer.read().decode()
    chunks = [part + "\n\n" for part in text.split("\n\n") if part]
    expect(request.get("output") == ANSWER and chunks[-1] == "data: [DONE]\n\n", (request, chunks))
    return {"request": request, "chat": chat, "chunks": chunks}


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, every thread) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def process(
    command: list[str], cwd: Path, ready_line: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """``command`` running in ``cwd`` until the block ends (then SIGTERM): its pid and, with
    ``ready_line``, once it printed ``ready``, the words after it."""
    child = subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if ready_line else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    try:
        said: list[str] = []
        if ready_line:
            assert child.stdout is not None
            ready, *said = child.stdout.readline().split() or [""]
            expect(ready == "ready", "the floor did not start")
        yield child.pid, said
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(60)


def measure(count: int) -> dict[str, Any]:
    configure_logging("warning", process="benchmark")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "local").mkdir()
        (directory / "daemon").mkdir()
        shutil.copy(ROOT / "goondan.yaml.example", directory / "daemon" / "goondan.yaml")
        port, floor_port = free_port(), free_port()
        state = directory / "daemon" / ".goondan"
        daemon = [
            *(sys.executable, "-m", "orchestrator", "run", "goondan.yaml"),
            *("--listen", f"127.0.0.1:{port}", "--log-level", "warning"),
        ]
        local = InProcess(directory / "local")
        try:
            with process(daemon, directory / "daemon") as (daemon_pid, _):
                ours = clients(port, state / "api.sock")
                wait_ready(ours["unix_socket"])
                answers = directory / "answers.json"
                answers.write_text(json.dumps(canned_answers(ours["tcp_loopback"])))
                floor_sock = directory / "floor.sock"
                floor = [
                    *(sys.executable, str(ROOT / "benchmarks" / "_http_floor.py")),
                    *(str(answers), str(floor_port), str(floor_sock)),
                ]
                with process(floor, directory, ready_line=True) as (_, (floor_parser,)):
                    floors = clients(floor_port, floor_sock)
                    api = DaemonApi(state)
                    figures = run_paths(count, local, ours, floors, api, daemon_pid)
                    figures["parsers"] = {"api": http_parser(), "floor": floor_parser}
                    for client in (*ours.values(), *floors.values()):
                        client.close()
        finally:
            local.close()
    return figures


def run_paths(
    count: int,
    local: InProcess,
    ours: dict[str, httpx2.Client],
    floors: dict[str, httpx2.Client],
    cli_api: DaemonApi,
    daemon_pid: int,
) -> dict[str, Any]:
    def over_cli_client() -> float:
        started = time.perf_counter()
        status, answer = cli_api.call("POST", REQUESTS, {"input": TEXT, "instanceKey": "c"})
        taken = time.perf_counter() - started
        expect(status == 200 and answer.get("output") == ANSWER, (status, answer))
        return taken

    # Each path has its own conversation and the paths take turns, so the history every
    # Turn reads grows alike on every path.
    paths: dict[str, Call] = {
        "in_process": local.request,
        "in_process_first_delta": local.first_delta,
        "cli_client_unix_socket": over_cli_client,
    }
    for transport in TRANSPORTS:
        short = transport[0]
        paths[f"http_{transport}"] = requesting(ours[transport], f"h{short}")
        paths[f"chat_{transport}"] = chatting(ours[transport], f"c{short}")
        paths[f"chat_stream_first_chunk_{transport}"] = first_chunk(ours[transport], f"s{short}")
        paths[f"floor_http_{transport}"] = requesting(floors[transport], "-")
        paths[f"floor_chat_{transport}"] = chatting(floors[transport], "-")
        paths[f"floor_chat_stream_first_chunk_{transport}"] = first_chunk(floors[transport], "-")
    # The front doors over TCP (what their clients use): the same Turn as http_tcp_loopback.
    for door, path in DOORS.items():
        paths[f"{door}_tcp_loopback"] = path(ours["tcp_loopback"], f"d-{door}", TEXT, ANSWER)
    for call in paths.values():
        for _ in range(WARM_UP):
            call()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    daemon_cpu = dict.fromkeys(paths, 0.0)
    for _ in range(count):
        for name, call in paths.items():
            time.sleep(PAUSE_SECONDS)
            before = cpu_seconds(daemon_pid)
            samples[name].append(call())
            daemon_cpu[name] += cpu_seconds(daemon_pid) - before
    figures: dict[str, Any] = {name: summary(taken) for name, taken in samples.items()}
    control = figures["in_process"]["median_ms"]
    for name, row in figures.items():
        if name.startswith(("in_process", "floor_")):
            continue
        row["ratio_to_in_process"] = row["median_ms"] / control
        baseline = figures["in_process_first_delta" if "stream" in name else "in_process"]
        row["added_ms"] = row["median_ms"] - baseline["median_ms"]
        row["daemon_cpu_ms"] = daemon_cpu[name] / count * 1000
        if name.endswith("_tcp_loopback") and name.split("_tcp")[0] in DOORS:
            row["over_api_ms"] = row["median_ms"] - figures["http_tcp_loopback"]["median_ms"]
            api_cpu = daemon_cpu["http_tcp_loopback"] / count * 1000
            row["over_api_cpu_ms"] = row["daemon_cpu_ms"] - api_cpu
        if f"floor_{name}" in figures:
            row["floor_ms"] = figures[f"floor_{name}"]["median_ms"]
            row["over_floor_ms"] = row["added_ms"] - row["floor_ms"]
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
    parsers = figures.pop("parsers")
    print(f"request → answer ({TEXT!r}, handoff + file write), {options.count} requests")
    print(f"HTTP/1.1 parser: the API's {parsers['api']}, the floor's {parsers['floor']}")
    header = ("path", "median ms", "p99 ms", "p99/med", "added ms", "floor ms", "ours ms", "vs API",
              "CPU ms", "CPU-API")  # fmt: skip
    print(f"{header[0]:<44}" + "".join(f"{cell:>10}" for cell in header[1:]))
    for name, row in figures.items():
        cells = [row["median_ms"], row["p99_ms"], row["p99_to_median"]]
        keys = ("added_ms", "floor_ms", "over_floor_ms", "over_api_ms", "daemon_cpu_ms")
        cells += [row.get(key) for key in (*keys, "over_api_cpu_ms")]
        print(f"{name:<44}" + "".join("" if c is None else f"{c:>10.2f}" for c in cells))


if __name__ == "__main__":
    main()
