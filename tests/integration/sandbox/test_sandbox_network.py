"""A sandboxed program with network, against a real daemon, on each backend of the sandbox: its
only way out is the agent's proxy, which reaches a public host and refuses everything of this
machine (its loopback listeners, the studio, the daemon's port, cloud metadata, a name that
resolves to loopback, the host's own addresses, its abstract Unix sockets), and every connection
is recorded on the call's span in the event log.

This machine has no internet, so the "public" host is a stand-in: a network namespace joined to
the host by a veth pair on a documentation prefix (not loopback, not RFC 1918), serving HTTP,
and reached by a name the Tool's ``sandbox.network.hosts`` maps.
"""

from __future__ import annotations

import json
import secrets
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import free_port
from tests.support.sandbox_attack import BACKENDS, AttackSwarm, attack_daemon
from tests.support.studio import StudioProcess

pytestmark = pytest.mark.timeout(240)

IP = shutil.which("ip") or "/usr/sbin/ip"
MCP_SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"
BODY = "public-standin-ok"
SERVER = f"""
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{BODY}\\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler)
print("ready", flush=True)
server.serve_forever()
"""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^run (?P<command>[\\\\s\\\\S]+)$"}
        call: {tool: bash__exec, args: {command: "{command}", timeoutMs: 60000}}
      - when: {input: "^fetch (?P<url>.+)$"}
        call: {tool: mcp__fetch, args: {url: "{url}"}}
      - when: {toolResult: bash__exec, status: ok}
        reply: "{result}"
      - when: {toolResult: mcp__fetch, status: ok}
        reply: "{result.result}"
      - when: {status: error}
        reply: "refused {errorCode}"
      - reply: "idle"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: mallory}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - ref: {kind: Tool, name: bash, package: "@goondan/base"}
      config:
        sandbox:
          network:
            hosts: {public.test: "%(public)s", rebind.test: 127.0.0.1, own.test: "%(own)s"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: courier}
spec:
  modelConfig: {modelRef: Model/brain}
  extensions:
    - ref: {kind: Extension, name: mcp, package: "@goondan/base"}
      config:
        servers:
          - name: local
            command: "%(python)s"
            args: ["%(server)s"]
            sandbox:
              network: {hosts: {public.test: "%(public)s", rebind.test: 127.0.0.1}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/mallory
  agents: [Agent/mallory, Agent/courier]
  policy: {sandbox: %(backend)s}
"""


@dataclass
class PublicHost:
    """The stand-in: ``address`` serves HTTP on ``port``; ``own`` is the host's end."""

    address: str
    own: str
    port: int


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def public_host() -> Iterator[PublicHost]:
    tag = secrets.token_hex(3)
    namespace, outside, inside = f"gpub-{tag}", f"gpa{tag}", f"gpb{tag}"
    # A /30 of a documentation prefix, random so that parallel runs do not meet.
    block = secrets.randbelow(64) * 4
    prefix = secrets.choice(("198.51.100", "203.0.113"))
    own, address = f"{prefix}.{block + 1}", f"{prefix}.{block + 2}"
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("addr", "add", f"{own}/30", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/30", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        server = subprocess.Popen(
            [IP, "netns", "exec", namespace, sys.executable, "-c", SERVER, address, "8080"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 30)
        assert ready, "the stand-in did not start"
        assert server.stdout.readline() == b"ready\n"
        yield PublicHost(address, own, 8080)
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
            if server.stdout is not None:
                server.stdout.close()
        subprocess.run([IP, "link", "del", outside], capture_output=True, timeout=30)
        subprocess.run([IP, "netns", "del", namespace], capture_output=True, timeout=30)


@dataclass
class Swarm(AttackSwarm):
    port: int
    studio: StudioProcess

    @property
    def events(self) -> Path:
        return self.directory / ".goondan" / "runtime-events.jsonl"

    def connections(self, host: str, count: int = 1, deadline: float = 30) -> list[dict[str, Any]]:
        """The ``network.connection`` events about ``host``, once ``count`` are in the log
        (the daemon writes it as the agent reports; bounded)."""
        end = time.monotonic() + deadline
        while True:
            found = []
            with self.events.open("rb") as log:
                for line in log:
                    if b'"network.connection"' in line:
                        event = json.loads(line)
                        if event.get("host") == host:
                            found.append(event)
            if len(found) >= count or time.monotonic() > end:
                return found
            time.sleep(0.05)

    def tool_span(self, connection: dict[str, Any]) -> str:
        """The span of the tool call ``connection`` (an event) names."""
        with self.events.open("rb") as log:
            for line in log:
                event = json.loads(line)
                if (
                    event.get("type") == "tool.called"
                    and event.get("toolCallId") == connection["toolCallId"]
                    and event.get("agentName") == connection["agentName"]
                    and event.get("traceId") == connection["traceId"]
                ):
                    return str(event["spanId"])
        raise AssertionError(f"no tool.called for {connection}")


@pytest.fixture(scope="module", params=BACKENDS)
def swarm(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    public_host: PublicHost,
) -> Iterator[Swarm]:
    directory = tmp_path_factory.mktemp(f"network-{request.param}")
    config = SWARM % {
        "backend": request.param,
        "public": public_host.address,
        "own": public_host.own,
        "python": sys.executable,
        "server": MCP_SERVER,
    }
    port = free_port()
    with attack_daemon(directory, config, args=["--listen", f"127.0.0.1:{port}"]) as daemon:
        studio = StudioProcess("--state-dir", ".goondan", cwd=directory)
        try:
            yield Swarm(directory, daemon, request.param, port, studio)
        finally:
            studio.stop()


def test_a_public_host_is_reached_through_the_proxy_and_recorded(
    swarm: Swarm, public_host: PublicHost
) -> None:
    url = f"http://public.test:{public_host.port}/"
    out = swarm.bash(
        f"curl -sS -m 20 {url}; "  # absolute-form through HTTP_PROXY
        f"curl -sS -m 20 --proxytunnel -x http://127.0.0.1:3128 {url}; "  # CONNECT
        f"curl -sS -m 20 -x socks5h://127.0.0.1:1080 {url}; "  # SOCKS5, the name resolved outside
        "python3 -c 'import urllib.request as u; "
        f'print(u.urlopen("{url}", timeout=20).read().decode().strip())\''
    )
    assert str(out["stdout"]).split() == [BODY] * 4, out
    made = swarm.connections("public.test", count=4)
    assert {e["protocol"] for e in made} == {"http", "connect", "socks5"}
    for event in made:
        assert event["allowed"] is True
        assert event["address"] == public_host.address
        assert event["port"] == public_host.port
        assert event["bytesUp"] > 0
        assert event["bytesDown"] > len(BODY)
        assert event["toolName"] == "bash__exec"
        # On the call's span: the tool span of the bash call, under its Step.
        assert event["spanId"] == swarm.tool_span(event)


def test_this_machine_is_refused_and_every_refusal_recorded(
    swarm: Swarm, public_host: PublicHost
) -> None:
    studio_port = int(swarm.studio.url.rstrip("/").rsplit(":", 1)[1])
    targets = {
        "127.0.0.1": f"http://127.0.0.1:{free_port()}/",
        "127.0.0.2": f"http://127.0.0.2:{studio_port}/api/session",
        "169.254.169.254": "http://169.254.169.254/latest/meta-data/",
        "localhost": f"http://localhost:{swarm.port}/healthz",
        "rebind.test": f"http://rebind.test:{swarm.port}/healthz",
        "own.test": f"http://own.test:{public_host.port}/",
        public_host.own: f"http://{public_host.own}:{public_host.port}/",
    }
    direct = [
        f"http://127.0.0.1:{studio_port}/api/session",
        f"http://127.0.0.1:{swarm.port}/healthz",
    ]
    command = "; ".join(
        # --noproxy '': through the proxy even where NO_PROXY would send it direct.
        [
            f"curl -s -m 20 --noproxy '' -o /dev/null -w '%{{http_code}} ' {u}"
            for u in targets.values()
        ]
        + [f"curl -s -m 10 {u} -o /dev/null; echo direct=$?" for u in direct]
        + [
            "curl -s -m 20 -x socks5h://127.0.0.1:1080 http://169.254.169.254/ -o /dev/null; "
            "echo socks=$?",
            "curl -s -m 20 --noproxy '' -x socks5://127.0.0.1:1080 http://[::1]:80/ -o /dev/null; "
            "echo socks6=$?",
            # A program that ignores the proxy: the host's listeners are not in its namespace.
            "python3 -c 'import socket; s = socket.socket(); "
            f'print("python=%s" % s.connect_ex(("127.0.0.1", {swarm.port})))\'',
        ]
    )
    out = swarm.bash(command)
    said = str(out["stdout"])
    assert said.split()[: len(targets)] == ["403"] * len(targets), out
    # Direct to 127.0.0.1: the sandbox's own loopback, where nothing of the host listens.
    assert said.count("direct=7") == len(direct), out
    assert "socks=97" in said  # curl: the SOCKS5 server refused (connection not allowed)
    assert "socks6=97" in said
    assert "python=111" in said  # ECONNREFUSED, while the daemon listens on the host's
    for host in [*targets, "::1"]:
        [refused, *_] = swarm.connections(host)
        assert refused["allowed"] is False, refused
        assert refused["reason"], refused
        assert refused["bytesUp"] == 0
        assert refused["bytesDown"] == 0
    assert "169.254.0.0/16" in swarm.connections("169.254.169.254")[0]["reason"]
    assert "address of this host" in swarm.connections("own.test")[0]["reason"]


def test_the_hosts_abstract_unix_sockets_are_out_of_reach(swarm: Swarm) -> None:
    name = f"goondan-test-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)
        listener.listen()
        out = swarm.bash(
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); "
            f'print(s.connect_ex("\\0{name}"))\''
        )
        # ECONNREFUSED: no such socket in the sandbox's own network namespace.
        assert str(out["stdout"]).strip() == "111", out
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_an_mcp_server_reaches_the_public_host_and_nothing_of_this_machine(
    swarm: Swarm, public_host: PublicHost
) -> None:
    # An MCP server has network by default, through its own proxy, for as long as it runs.
    url = f"http://public.test:{public_host.port}/"
    assert swarm.send("courier", f"fetch {url}") == BODY
    for target in (
        f"http://rebind.test:{swarm.port}/healthz",
        f"http://127.0.0.1:{swarm.port}/healthz",  # direct: the sandbox's own loopback
        "http://169.254.169.254/latest/meta-data/",
    ):
        said = swarm.send("courier", f"fetch {target}")
        assert said.startswith(("refused 403", "failed")), said
        assert "healthz" not in said
    [reached] = [
        e for e in swarm.connections("public.test", count=1) if e["agentName"] == "courier"
    ]
    assert reached["allowed"] is True
    assert reached["toolName"] == "mcp__fetch"
    assert reached["spanId"] == swarm.tool_span(reached)
    refused = [e for e in swarm.connections("rebind.test") if e["agentName"] == "courier"]
    assert refused
    assert refused[0]["allowed"] is False
    assert any(e["agentName"] == "courier" for e in swarm.connections("169.254.169.254"))
