"""The harness of the sandbox attack tests: a real daemon per backend, whose agent ``mallory``
runs what a prompt-injected model would ask of ``bash`` (tests/integration/sandbox/).

Each test module writes its own swarm (its attack needs its tools and limits) and gets the
daemon, the ways to talk to it and the backends to run on from here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemon import Daemon, run_cli

BACKENDS = ["bwrap", "namespaces"]
"""Every backend of the sandbox; a module's ``swarm`` fixture runs once per backend."""

BASH_AND_READ_MODEL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^run (?P<command>[\\\\s\\\\S]+)$"}
        call: {tool: bash__exec, args: {command: "{command}", timeoutMs: 20000}}
      - when: {input: "^read (?P<path>.+)$"}
        call: {tool: file-system__read, args: {path: "{path}"}}
      - when: {toolResult: bash__exec, status: ok}
        reply: "{result}"
      - when: {status: error}
        reply: "refused {errorCode}"
      - when: {toolResult: file-system__read}
        reply: "read {result.content}"
      - reply: "idle"
"""
"""A model that does as it is told: ``run COMMAND`` calls ``bash``, ``read PATH`` the
file system; it answers with the tool's result or ``refused CODE``. Written for ``%`` formatting
(its backslashes doubled)."""


@contextlib.contextmanager
def attack_daemon(
    directory: Path,
    config: str,
    *,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[Daemon]:
    """A daemon serving ``config`` (written as ``directory/goondan.yaml``), started and
    stopped with the block, even when it never came up."""
    (directory / "goondan.yaml").write_text(config)
    daemon = Daemon(directory, bundle="goondan.yaml", env=dict(env or {}), args=list(args))
    try:
        daemon.wait_for("orchestrator started", deadline=60)
        yield daemon
    finally:
        daemon.stop()


@dataclass
class AttackSwarm:
    """A running attack swarm and the ways to talk to it."""

    directory: Path
    daemon: Daemon
    backend: str

    @property
    def state(self) -> Path:
        """The daemon's state directory."""
        return self.directory / ".goondan"

    def instance_dir(self, agent: str = "mallory", instance: str = "default") -> Path:
        """Where ``agent``'s conversation ``instance`` lives (its workspace is under it)."""
        return self.state / "agents" / agent / "instances" / instance

    def send(self, agent: str, text: str, instance: str = "default") -> str:
        """``goondan send``: the agent's answer."""
        done = run_cli("send", agent, text, "--instance", instance, cwd=self.directory, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def run(self, command: str, agent: str = "mallory", instance: str = "default") -> str:
        """The answer to ``run COMMAND``: ``bash``'s JSON result, or ``refused CODE``."""
        return self.send(agent, f"run {command}", instance)

    def bash(self, command: str, agent: str = "mallory") -> dict[str, object]:
        """``bash``'s JSON result of ``command`` (a refusal fails the test)."""
        answer = self.run(command, agent)
        assert not answer.startswith("refused"), answer
        output: dict[str, object] = json.loads(answer)
        return output
