"""A thousand conversations on a slow model: many requests at once, through the daemon's HTTP API.

The model is slow, as a hosted one is: a fake OpenAI-compatible provider on 127.0.0.1
(``benchmarks/_slow_provider.py``, a process of its own, its accept backlog raised) answers
every Chat Completions call after ``--delay`` seconds. Each Turn is a model call that asks for
the base tool ``wait__wait`` (``seconds: 0``), the tool, and a second model call that answers
``done: TEXT``; so a Turn's ideal time is 2 × delay (the tool's time is nil). With
``--delegate`` the agents are coordinator/worker pairs: the coordinator's Turn asks its worker
(``agents__request``) for that same Turn and relays its answer, 4 × delay in all.

``--agents`` agents are all started (each answers one request, a few agents at a time) before
anything is measured; then ``--requests`` requests are fired at once at ``POST
/v1/agents/{agent}/requests``, each on an instance key of its own, spread over the entry
agents, a connection each (``httpx2.AsyncClient`` s of ten connections: see :class:`Clients`).
With ``--stream`` each asks for server-sent events (and ``relay``, so a worker's text reaches
the client too). Every answer is checked.

Figures: answered, and errors by kind (HTTP status and error code, a connection closed without
an answer, a wrong answer...); the wall time of the burst against the ideal; p50/p99 of each
request's overhead above the model's time; CPU seconds per request of the daemon's whole
process tree (``/proc`` of the daemon and every descendant, before and after); PSS added per
Turn in flight (``smaps_rollup`` of the tree at its peak during the burst against idle, over
the most Turns in flight at once: the most model calls the provider had at once; with
``--delegate``, the most requests, each a coordinator's Turn and its worker's); with
``--stream``, how late a streamed chunk reaches the client after the provider wrote it (the
provider stamps it with ``time.monotonic()``), for the agent asked and, with ``--delegate``,
for the worker it asks.

Beside them, measured against the same provider in the same run: the provider alone (the same
burst from the same clients straight at it: the floor of the client and the provider together,
and the provider's requests per second), and the OpenAI Agents SDK running the same Turn the
same number of times at once in one process, on one ``AsyncOpenAI`` client as the SDK is used
(``benchmarks/_agents_sdk_peer.py``; needs the ``bench`` extra, else it is skipped and says
why; it runs the Turn without delegation only).

And a bare provider call's CPU: the bare client of ``benchmarks/_slow_provider.py`` makes the
same model calls at once (as many conversations, as many calls each, streamed or not) to the
same provider in a process of its own, with nothing but the loop's streams and ``json``; the
daemon tree's CPU per request is given as a multiple of that floor's (``cpu_over_bare_client``),
which a loaded machine moves far less than either figure.

Run: ``python benchmarks/slow_model.py [--requests M] [--agents N] [--delay S] [--stream]
[--delegate] [--json] [--quick]``. ``--quick``: 20 requests over 2 agents, delay 0.05 s. Exits
non-zero when a request got a wrong answer, or in ``--quick`` mode when any request failed or
the CPU per request is more than :data:`QUICK_CPU_OVER_BARE_BUDGET` times the bare client's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository's packages, not this folder's modules

import httpx2  # noqa: E402

from benchmarks._checks import WrongAnswer  # noqa: E402
from benchmarks._process_figures import cpu_ms, descendants, memory_mib  # noqa: E402
from benchmarks._slow_provider import STAMP  # noqa: E402

PROVIDER = ROOT / "benchmarks" / "_slow_provider.py"
PEER = ROOT / "benchmarks" / "_agents_sdk_peer.py"
STARTING_AT_ONCE = 5
"""Agents started together before the burst (see :func:`start_agents`)."""
CONNECTIONS_PER_CLIENT = 10
"""Connections of each HTTP client (see :class:`Clients`)."""
SAMPLE_SECONDS = 0.2
"""How often the daemon's memory is read during the burst."""
START_SECONDS = 120
"""The most the provider, the daemon or its agents may take to be ready."""
QUICK_CPU_OVER_BARE_BUDGET = 200.0
"""``--quick`` fails when the daemon tree's CPU per request is more than this many times the
bare client's: about three times the 50-75× measured in ``--quick`` on a loaded machine, so
that only a real regression fails it, never the load (docs/performance.md)."""

MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: slow}}
spec:
  provider: openai
  model: slow
  baseUrl: {url}/v1
  apiKey: {{value: sk-local}}
"""
AGENT = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/slow}}
  prompt: {{system: "{prompt}"}}
  tools:
    - {{ref: {{kind: Tool, name: {tool}, package: "@goondan/base"}}}}
"""
SWARM = """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: slow-model}}
spec:
  entryAgent: Agent/{entry}
  agents: [{agents}]
"""


def swarm_yaml(url: str, agents: int, delegate: bool) -> tuple[str, list[str]]:
    """The bundle of ``agents`` agents on the provider at ``url``, and the agents to ask."""
    documents = [MODEL.format(url=url)]
    entries: list[str] = []
    names: list[str] = []
    if delegate:
        for pair in range(agents // 2):
            coordinator, worker = f"coordinator-{pair}", f"worker-{pair}"
            prompt = f"You coordinate: delegate to {worker}."
            documents.append(AGENT.format(name=coordinator, prompt=prompt, tool="agents"))
            documents.append(
                AGENT.format(name=worker, prompt="You wait, then answer.", tool="wait")
            )
            entries.append(coordinator)
            names += [coordinator, worker]
    else:
        for index in range(agents):
            name = f"agent-{index}"
            documents.append(AGENT.format(name=name, prompt="You wait, then answer.", tool="wait"))
            entries.append(name)
            names.append(name)
    listed = ", ".join(f"Agent/{name}" for name in names)
    documents.append(SWARM.format(entry=entries[0], agents=listed))
    return "".join(documents), entries


def expected_answer(text: str, delegate: bool) -> str:
    """What the Turn of ``text`` must answer (stamps of streamed text taken off)."""
    return f"relayed: done: {text}" if delegate else f"done: {text}"


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The ``fraction`` percentile of the sorted ``ordered`` (nearest rank), in ms."""
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000, 1)


# -- the processes -------------------------------------------------------------------------


class Provider:
    """``benchmarks/_slow_provider.py`` in a process of its own."""

    def __init__(self, delay: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(PROVIDER), "--delay", str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        # Its port, once it listens (bounded: a provider that hangs must not hang the run).
        ready, _, _ = select.select([self.process.stdout], [], [], START_SECONDS)
        line = self.process.stdout.readline().strip() if ready else ""
        if not line.isdigit():
            self.close()
            raise RuntimeError("the slow provider did not start")
        self.url = f"http://127.0.0.1:{line}"

    def stats(self) -> dict[str, Any]:
        """What the provider saw since the last call: ``requests``, ``maxInFlight`` (the most
        model calls at once: a Turn has one at a time, so the most Turns in flight)."""
        data: dict[str, Any] = httpx2.get(f"{self.url}/stats", timeout=30).json()
        return data

    def close(self) -> None:
        self.process.kill()
        self.process.wait(30)


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Daemon:
    """``goondan run`` of the bundle in ``directory``, its HTTP API on a loopback port."""

    def __init__(self, directory: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = directory / "daemon.log"
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "orchestrator", "run", "goondan.yaml"),
                *("--listen", self.url.removeprefix("http://"), "--log-level", "warning"),
            ],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
            env={**os.environ, "PYTHONPATH": str(ROOT), "GOONDAN_LOG_LEVEL": "warning"},
        )

    async def ready(self, client: httpx2.AsyncClient) -> None:
        """Wait until ``/readyz`` answers 200 (the entry agent is up), or fail."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            with contextlib.suppress(httpx2.TransportError):
                if (await client.get(f"{self.url}/readyz")).status_code == 200:
                    return
            if self.process.poll() is not None:
                said = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the daemon exited with {self.process.returncode}: {said}")
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon did not become ready")
            await asyncio.sleep(0.05)

    def tree(self) -> list[int]:
        """The daemon and every process under it (its fork server, its agents...)."""
        return descendants(self.process.pid)

    def cpu_seconds(self) -> float:
        """CPU time the tree's processes have used so far, all their threads."""
        total = 0.0
        for pid in self.tree():
            with contextlib.suppress(OSError):
                total += cpu_ms(pid)
        return total / 1000

    def pss_mib(self) -> float:
        """The tree's PSS now (shared pages divided among the processes sharing them)."""
        total = 0.0
        for pid in self.tree():
            with contextlib.suppress(OSError, KeyError):
                total += memory_mib(pid)["Pss"]
        return total

    def close(self) -> None:
        """Stop the daemon as an operator does (SIGTERM), or kill it after a minute."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)


# -- the burst -------------------------------------------------------------------------------


@dataclass
class Burst:
    """What the requests of one burst got."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    """The first message of each error kind."""
    chunk_delays: dict[str, list[float]] = field(default_factory=dict)
    """Seconds from the provider writing a stamped chunk to the client reading it, by role."""

    def failed(self, kind: str, detail: str) -> None:
        """Count one request that got no right answer, by ``kind``."""
        self.errors[kind] += 1
        self.examples.setdefault(kind, detail[:300])


def error_kind(exc: Exception) -> str:
    """A transport error's kind, as a reader of the report understands it."""
    if isinstance(exc, httpx2.RemoteProtocolError):
        return "connection closed without an answer"
    if isinstance(exc, httpx2.ConnectError):
        return "connection refused or failed"
    if isinstance(exc, httpx2.TimeoutException):
        return "timed out"
    return type(exc).__name__


def http_error_kind(status: int, body: str) -> str:
    """``HTTP 502 E_CODE``: the status and the error code the body names, if any."""
    code = ""
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(body)
        error = data.get("error")
        code = str(error.get("code") if isinstance(error, dict) else data.get("code") or "")
    return f"HTTP {status} {code}".strip()


def answer_text(answer: dict[str, Any]) -> str:
    """The text of a delegate answer, stamps of streamed text taken off."""
    return STAMP.sub("", str(answer.get("output") or "")).strip()


async def ask(
    client: httpx2.AsyncClient,
    url: str,
    text: str,
    key: str,
    stream: bool,
    burst: Burst,
) -> dict[str, Any] | None:
    """One request; its delegate answer, or ``None`` after counting why there is none."""
    body: dict[str, Any] = {"input": text, "instanceKey": key}
    if stream:
        body |= {"stream": True, "relay": True}
    try:
        if not stream:
            response = await client.post(url, json=body)
            if response.status_code != 200:
                burst.failed(http_error_kind(response.status_code, response.text), response.text)
                return None
            answer: dict[str, Any] = response.json()
            return answer
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text_body = (await response.aread()).decode(errors="replace")
                burst.failed(http_error_kind(response.status_code, text_body), text_body)
                return None
            return await read_events(response, burst)
    except httpx2.HTTPError as exc:
        burst.failed(error_kind(exc), f"{type(exc).__name__}: {exc}")
        return None


async def read_events(response: httpx2.Response, burst: Burst) -> dict[str, Any] | None:
    """The answer event of a streamed request; each stamped delta's delay noted by role."""
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = json.loads(line.removeprefix("data:"))
            if event == "delta":
                arrived = time.monotonic()
                role = "delegated" if str(data.get("agent", "")).startswith("worker") else "asked"
                for stamp in STAMP.findall(str(data.get("text", ""))):
                    burst.chunk_delays.setdefault(role, []).append(arrived - float(stamp))
            elif event == "answer":
                answer: dict[str, Any] = data
                return answer
    burst.failed("stream ended without an answer", "")
    return None


async def fire(
    clients: Clients,
    base: str,
    entries: list[str],
    requests: int,
    options: argparse.Namespace,
    burst: Burst,
    prefix: str,
) -> None:
    """``requests`` requests at once; each checked, its latency noted when right."""

    async def one(n: int) -> None:
        text = f"conversation {prefix}{n}"
        agent = entries[n % len(entries)]
        started = time.monotonic()
        url = f"{base}/v1/agents/{agent}/requests"
        answer = await ask(clients[n], url, text, f"{prefix}{n}", options.stream, burst)
        if answer is None:
            return
        if answer.get("status") != "ok":
            error = answer.get("error") or {}
            burst.failed(f"answer {error.get('code')}", json.dumps(answer))
            return
        if answer_text(answer) != expected_answer(text, options.delegate):
            burst.failed("wrong answer", json.dumps(answer))
            return
        burst.latencies.append(time.monotonic() - started)

    await asyncio.gather(*(one(n) for n in range(requests)))


class Clients(contextlib.AsyncExitStack):
    """Enough ``httpx2.AsyncClient`` s for a connection per request in flight, each holding
    :data:`CONNECTIONS_PER_CLIENT` at most.

    One client with a thousand connections would itself be the bottleneck: its pool does work
    in proportion to its connections for every request (a thousand requests at once straight
    at the provider took 12 s there, against 2 s over clients of ten connections)."""

    def __init__(self, requests: int, timeout: float) -> None:
        super().__init__()
        per = CONNECTIONS_PER_CLIENT
        limits = httpx2.Limits(max_connections=per, max_keepalive_connections=per)
        self.clients = [
            httpx2.AsyncClient(limits=limits, timeout=timeout) for _ in range(-(-requests // per))
        ]

    async def __aenter__(self) -> Clients:
        for client in self.clients:
            await self.enter_async_context(client)
        return self

    def __getitem__(self, n: int) -> httpx2.AsyncClient:
        """The client of request ``n``."""
        return self.clients[n % len(self.clients)]


# -- the phases ------------------------------------------------------------------------------


async def provider_alone(url: str, requests: int, delay: float) -> dict[str, Any]:
    """The same burst straight at the provider: a model call each, answered after ``delay``."""
    body = {
        "model": "slow",
        "messages": [{"role": "user", "content": "alone"}],
        "tools": [{"type": "function", "function": {"name": "wait__wait", "parameters": {}}}],
    }
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    async def one(client: httpx2.AsyncClient) -> None:
        started = time.monotonic()
        try:
            response = await client.post(f"{url}/v1/chat/completions", json=body)
        except httpx2.HTTPError as exc:
            errors[error_kind(exc)] += 1
            return
        if response.status_code != 200 or "wait__wait" not in response.text:
            errors[f"HTTP {response.status_code}"] += 1
            return
        latencies.append(time.monotonic() - started)

    async with Clients(requests, 60 + delay) as clients:
        started = time.monotonic()
        await asyncio.gather(*(one(clients[n]) for n in range(requests)))
        wall = time.monotonic() - started
    overheads = sorted(latency - delay for latency in latencies)
    return {
        "answered": len(latencies),
        "errors": dict(errors),
        "wall_s": round(wall, 3),
        "ideal_s": delay,
        "requests_per_s": round(len(latencies) / wall, 1),
        "overhead_p50_ms": percentile(overheads, 0.50),
        "overhead_p99_ms": percentile(overheads, 0.99),
    }


async def start_agents(
    clients: Clients, base: str, entries: list[str], options: argparse.Namespace
) -> None:
    """Start every agent by asking each one (and so its worker) a question, checked, a few at a
    time: dozens starting at once on a busy machine may miss the agents' start deadline, and
    only the burst is measured. An agent that did not start is asked again, twice at most."""
    waiting = list(entries)
    for attempt in range(3):
        failed: list[str] = []
        for first in range(0, len(waiting), STARTING_AT_ONCE):
            batch = waiting[first : first + STARTING_AT_ONCE]
            warm = Burst()
            await fire(clients, base, batch, len(batch), options, warm, f"warm-{attempt}-{first}-")
            if warm.errors.get("wrong answer"):
                raise WrongAnswer(f"wrong answers from a first Turn: {warm.examples}")
            if warm.errors:
                failed += batch  # which of them failed is not told: ask the batch again
                last = warm
        if not failed:
            return
        waiting = failed
    raise RuntimeError(f"agents did not start: {dict(last.errors)} {last.examples}")


def per_turn_kib(added_mib: float, turns: int) -> float | None:
    """Memory added per Turn in flight, in KiB (``None``: no Turn was in flight)."""
    return round(added_mib * 1024 / turns, 1) if turns else None


def sample_memory(daemon: Daemon, stop: threading.Event, peak: dict[str, float]) -> None:
    """Read the daemon tree's PSS every :data:`SAMPLE_SECONDS` until ``stop``; keep the
    highest (a thread: the readings take a while for dozens of processes, and the client's
    loop must not wait for them)."""
    while not stop.is_set():
        peak["pss_mib"] = max(peak["pss_mib"], daemon.pss_mib())
        stop.wait(SAMPLE_SECONDS)


async def through_daemon(provider: Provider, options: argparse.Namespace) -> dict[str, Any]:
    """Start the swarm, start every agent, then fire the burst at the daemon's HTTP API."""
    calls = 4 if options.delegate else 2
    ideal = calls * options.delay
    with tempfile.TemporaryDirectory(prefix="goondan-slow-model-") as tmp:
        directory = Path(tmp)
        text, entries = swarm_yaml(provider.url, options.agents, options.delegate)
        (directory / "goondan.yaml").write_text(text)
        daemon = Daemon(directory)
        try:
            async with Clients(options.requests, options.timeout) as clients:
                await daemon.ready(clients[0])
                await start_agents(clients, daemon.url, entries, options)
                await asyncio.sleep(0.5)  # what the first Turns left to do settles
                idle_pss = await asyncio.to_thread(daemon.pss_mib)
                processes = len(daemon.tree())
                cpu_before = await asyncio.to_thread(daemon.cpu_seconds)
                burst = Burst()
                peak = {"pss_mib": idle_pss}
                await asyncio.to_thread(provider.stats)  # the provider counts from here
                stop = threading.Event()
                sampler = threading.Thread(
                    target=sample_memory, args=(daemon, stop, peak), daemon=True
                )
                sampler.start()
                started = time.monotonic()
                await fire(clients, daemon.url, entries, options.requests, options, burst, "")
                wall = time.monotonic() - started
                stop.set()
                await asyncio.to_thread(sampler.join, 30)
                cpu = await asyncio.to_thread(daemon.cpu_seconds) - cpu_before
                in_flight = int((await asyncio.to_thread(provider.stats))["maxInFlight"])
        finally:
            daemon.close()
    overheads = sorted(latency - ideal for latency in burst.latencies)
    figures: dict[str, Any] = {
        "requests": options.requests,
        "agents": options.agents,
        "answered": len(burst.latencies),
        "errors": dict(burst.errors),
        "error_examples": burst.examples,
        "wall_s": round(wall, 3),
        "ideal_s": ideal,
        "overhead_p50_ms": percentile(overheads, 0.50),
        "overhead_p99_ms": percentile(overheads, 0.99),
        "cpu_s_per_request": round(cpu / options.requests, 4),
        "processes": processes,
        "idle_pss_mib": round(idle_pss, 1),
        "peak_pss_mib": round(peak["pss_mib"], 1),
        "turns_in_flight_max": in_flight,
        "pss_per_turn_in_flight_kib": per_turn_kib(peak["pss_mib"] - idle_pss, in_flight),
    }
    if options.stream:
        figures["chunk_delay_ms"] = {
            role: {"p50": percentile(sorted(d), 0.50), "p99": percentile(sorted(d), 0.99)}
            for role, d in burst.chunk_delays.items()
        }
    return figures


def agents_sdk(provider: Provider, options: argparse.Namespace) -> dict[str, Any]:
    """The peer's figures (``benchmarks/_agents_sdk_peer.py``), or why it was skipped."""
    if importlib.util.find_spec("agents") is None:
        return {"skipped": "openai-agents is not installed: pip install -e '.[bench]'"}
    if options.delegate:
        return {"skipped": "the peer runs the Turn without delegation only"}
    command = [sys.executable, str(PEER), "--url", provider.url, "--delay", str(options.delay)]
    command += ["--requests", str(options.requests), *(["--stream"] if options.stream else [])]
    provider.stats()  # the provider counts from here
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=options.timeout + 120, check=False
    )
    in_flight = int(provider.stats()["maxInFlight"])
    if done.returncode != 0:
        raise RuntimeError(f"the Agents SDK peer failed: {done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["errors"].get("wrong answer"):
        raise WrongAnswer(f"the Agents SDK peer got wrong answers: {figures['errors']}")
    figures["turns_in_flight_max"] = in_flight
    added = figures["peak_pss_mib"] - figures["idle_pss_mib"]
    figures["pss_per_turn_in_flight_kib"] = per_turn_kib(added, in_flight)
    return figures


def bare_client(provider: Provider, options: argparse.Namespace) -> dict[str, Any]:
    """The bare client's CPU for the daemon's model calls (see the module doc)."""
    calls = 4 if options.delegate else 2
    command = [sys.executable, str(PROVIDER), "--bare-client", provider.url]
    command += ["--requests", str(options.requests), "--calls", str(calls)]
    command += ["--stream"] if options.stream else []
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=options.timeout + 120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the bare client failed: {done.stderr[-2000:]}")
    cpu = float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"])
    return {
        "calls": options.requests * calls,
        "cpu_ms_per_call": round(cpu * 1000 / (options.requests * calls), 4),
        "cpu_s_per_request": round(cpu / options.requests, 6),
    }


def measure(options: argparse.Namespace) -> dict[str, Any]:
    provider = Provider(options.delay)
    try:
        alone = asyncio.run(provider_alone(provider.url, options.requests, options.delay))
        ours = asyncio.run(through_daemon(provider, options))
        bare = bare_client(provider, options)
        peer = agents_sdk(provider, options)
    finally:
        provider.close()
    floor = bare["cpu_s_per_request"]
    ours["cpu_over_bare_client"] = round(ours["cpu_s_per_request"] / floor, 1) if floor else None
    return {
        "delay_s": options.delay,
        "stream": options.stream,
        "delegate": options.delegate,
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "cores": os.cpu_count(),
        "provider_alone": alone,
        "bare_client": bare,
        "goondan": ours,
        "openai_agents": peer,
    }


def print_table(figures: dict[str, Any]) -> None:
    """The human form of ``figures``."""
    ours, alone, peer = figures["goondan"], figures["provider_alone"], figures["openai_agents"]
    workload = "coordinator → worker, 4 model calls" if figures["delegate"] else "2 model calls"
    print(
        f"{ours['requests']} requests at once over {ours['agents']} agents, model delay "
        f"{figures['delay_s']} s, {workload} + wait__wait per Turn, "
        f"stream {'on' if figures['stream'] else 'off'}; load average "
        f"{figures['load_average']} on {figures['cores']} cores"
    )
    header = f"{'':<22} {'answered':>9} {'wall s':>8} {'ideal s':>8} {'ovh p50 ms':>11} {'ovh p99 ms':>11}"
    print(header)
    rows = [("provider alone", alone), ("goondan daemon", ours)]
    if "skipped" not in peer:
        rows.append(("OpenAI Agents SDK", peer))
    for label, row in rows:
        p50, p99 = row["overhead_p50_ms"], row["overhead_p99_ms"]
        print(
            f"{label:<22} {row['answered']:>9} {row['wall_s']:>8.2f} {row['ideal_s']:>8.2f} "
            f"{p50 if p50 is not None else '-':>11} {p99 if p99 is not None else '-':>11}"
        )
    for label, row in rows:
        for kind, count in row["errors"].items():
            print(f"  {label}: {count} × {kind}")
    print(f"provider alone: {alone['requests_per_s']} requests/s")
    print(
        f"daemon tree ({ours['processes']} processes): {ours['cpu_s_per_request'] * 1000:.1f} ms "
        f"CPU per request; PSS {ours['idle_pss_mib']} MiB idle → {ours['peak_pss_mib']} MiB at "
        f"peak, {ours['turns_in_flight_max']} Turns in flight at most: "
        f"{ours['pss_per_turn_in_flight_kib']} KiB per Turn in flight"
    )
    bare = figures["bare_client"]
    print(
        f"bare provider calls ({bare['calls']}, one process): {bare['cpu_ms_per_call']} ms CPU "
        f"per call; the daemon tree's CPU per request is {ours['cpu_over_bare_client']}× theirs"
    )
    for role, delays in ours.get("chunk_delay_ms", {}).items():
        print(
            f"streamed chunk, provider → client ({role} agent): p50 {delays['p50']} ms, p99 {delays['p99']} ms"
        )
    if "skipped" in peer:
        print(f"OpenAI Agents SDK: skipped ({peer['skipped']})")
    else:
        print(
            f"OpenAI Agents SDK (one process): max RSS {peer['max_rss_mib']} MiB, PSS "
            f"{peer['idle_pss_mib']} MiB idle → {peer['peak_pss_mib']} MiB at peak with "
            f"{peer['turns_in_flight_max']} in flight at most: {peer['pss_per_turn_in_flight_kib']} KiB "
            "per Turn in flight"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests fired at once")
    parser.add_argument("--agents", type=int, default=10, help="agents (all started first)")
    parser.add_argument("--delay", type=float, default=1.0, help="the model's seconds per call")
    parser.add_argument("--stream", action="store_true", help="server-sent events, relayed")
    parser.add_argument("--delegate", action="store_true", help="coordinator → worker pairs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="20 requests, 2 agents, 0.05 s")
    options = parser.parse_args()
    if options.quick:
        options.requests, options.agents, options.delay, options.timeout = 20, 2, 0.05, 60.0
    if options.agents < (2 if options.delegate else 1) or options.requests < 1:
        parser.error("--agents must be at least 1 (2 with --delegate), --requests at least 1")
    figures = measure(options)
    if options.json:
        print(json.dumps(figures))
    else:
        print_table(figures)
    failed = figures["goondan"]["errors"]
    if failed.get("wrong answer") or (options.quick and failed):
        sys.exit(f"slow_model: requests failed: {failed}")
    over = figures["goondan"]["cpu_over_bare_client"]
    if options.quick and over is not None and over > QUICK_CPU_OVER_BARE_BUDGET:
        sys.exit(
            f"slow_model: CPU per request is {over}× the bare client's "
            f"(budget {QUICK_CPU_OVER_BARE_BUDGET}×)"
        )


if __name__ == "__main__":
    main()
