"""A real daemon's agents and connectors hold only the variables their own resources name.

The daemon starts with its API token, two agents' model keys, a connection's secret and an
unrelated secret in its environment. The connection's connector logs the names it holds and
asks the entry agent for a Turn, whose tool logs what any program of the user can read
(``/proc/self/environ``, the fork server's ``/proc/<ppid>/environ``) and ``os.environ``; the
test reads the agent's, the fork server's and the connector's ``/proc/<pid>/environ`` itself.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.swarm import FIXTURES

pytestmark = pytest.mark.timeout(120)

SECRETS = {
    "GOONDAN_API_TOKEN": "api-token-7f3a9c",
    "AGENT_B_KEY": "beta-model-key-51d2",
    "CONNECTOR_KEY": "connector-secret-0b8e",
    "UNRELATED_SECRET": "nobody-asked-for-9e41",
}
"""In the daemon's environment; no process of alpha's may hold any of them."""
OWN = {"AGENT_A_KEY": "alpha-model-key-c6d0", "PROBE_EXTRA": "declared-by-spec-env"}
"""What alpha's resources name: its Model's key and its spec.env."""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain-a}
spec:
  provider: scripted
  model: rules
  apiKey: {valueFrom: {env: AGENT_A_KEY}}
  script:
    rules:
      - when: {input: "^env$"}
        call: {tool: probe__read}
      - when: {toolResult: probe__read}
        reply: "probed"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain-b}
spec:
  provider: scripted
  model: rules
  apiKey: {valueFrom: {env: AGENT_B_KEY}}
  script:
    rules:
      - reply: "beta"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: probe}
spec:
  entry: ./environ_probe.py
  exports:
    - name: read
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: alpha}
spec:
  modelConfig: {modelRef: Model/brain-a}
  tools: [Tool/probe]
  # a pattern that covers the API token's variable: the token is withheld all the same
  env: ["GOONDAN_*", PROBE_EXTRA]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: beta}
spec:
  modelConfig: {modelRef: Model/brain-b}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: probe}
spec:
  entry: ./environ_connector.py
  events:
    - name: probe_event
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: probe-connection}
spec:
  connectorRef: Connector/probe
  secrets:
    PROBE_KEY: {valueFrom: {env: CONNECTOR_KEY}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/alpha
  agents: [Agent/alpha, Agent/beta]
"""


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    (tmp_path / "goondan.yaml").write_text(SWARM)
    for module in ("environ_probe.py", "environ_connector.py"):
        shutil.copy(FIXTURES / module, tmp_path / module)
    running = Daemon(
        tmp_path,
        bundle="goondan.yaml",
        env={**SECRETS, **OWN},
        args=["--api-token-env", "GOONDAN_API_TOKEN"],
    )
    try:
        yield running
    finally:
        running.stop()


def proc_environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as file:
        return file.read().decode(errors="replace")


def assert_holds_none(text: str, where: str, secrets: dict[str, str]) -> None:
    for name, value in secrets.items():
        assert value not in text, f"{where} holds {name}"
        assert f"{name}=" not in text, f"{where} names {name}"


def test_an_agent_holds_its_own_keys_and_no_other_secret(daemon: Daemon) -> None:
    # The connector asks alpha for an `env` Turn, whose tool call logs what it sees.
    report = daemon.wait_for("environment probe", process="agent:alpha")
    agent, fork_server = int(report["pid"]), int(report["ppid"])  # type: ignore[call-overload]
    with open(f"/proc/{fork_server}/cmdline", "rb") as file:
        assert b"multiprocessing.forkserver" in file.read()  # the agent's parent

    environ = report["environ"]
    assert isinstance(environ, dict)
    assert {name: environ.get(name) for name in OWN} == OWN
    assert_holds_none(json.dumps(environ), "os.environ", SECRETS)
    assert_holds_none(str(report["self_environ"]), "/proc/self/environ (from the tool)", SECRETS)
    assert_holds_none(str(report["parent_environ"]), "the fork server's (from the tool)", SECRETS)
    assert_holds_none(proc_environ(agent), f"/proc/{agent}/environ", SECRETS)
    # The fork server, and so what every child shows in /proc: no secret, not even alpha's.
    everything = {**SECRETS, **OWN}
    shown = proc_environ(fork_server)
    assert_holds_none(shown, f"/proc/{fork_server}/environ", everything)
    # What it shows is its start-up environment, or nothing at all once naming the process
    # (setproctitle) took that memory for the title: never anything else.
    assert "PATH=" in shown or not shown.strip("\x00")


def test_a_connector_holds_its_connections_secret_and_no_other(daemon: Daemon) -> None:
    record = daemon.wait_for("connector environment", process="connector:probe-connection")
    names = set(record["names"])  # type: ignore[call-overload]
    assert "CONNECTOR_KEY" in names  # its secret's valueFrom
    assert not names & {*SECRETS.keys() - {"CONNECTOR_KEY"}, *OWN}
    pid = int(record["pid"])  # type: ignore[call-overload]
    assert_holds_none(proc_environ(pid), f"/proc/{pid}/environ", {**SECRETS, **OWN})
