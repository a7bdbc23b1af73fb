"""Conversations of a real daemon never share files, and the state is private to its user."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path)
    running.wait_for("agent ready")
    yield running
    running.stop()


def send(tmp_path: Path, text: str, instance: str) -> str:
    done = run_cli("send", "beta", text, "--instance", instance, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def conversation_text(directory: Path) -> str:
    conversation = directory / "conversation"
    return "".join(p.read_text() for p in sorted(conversation.glob("*.jsonl")))


def test_a_key_spelled_like_another_keys_directory_gets_its_own(
    daemon: Daemon, tmp_path: Path
) -> None:
    tenant = "tenant/alice"
    # The name the older scheme gave "tenant/alice": once a key of its own, spelled like that.
    impostor = f"tenant-alice-{hashlib.sha1(tenant.encode()).hexdigest()[:10]}"
    assert send(tmp_path, "alice secret", tenant) == "beta got: alice secret"
    assert send(tmp_path, "impostor here", impostor) == "beta got: impostor here"

    rows = json.loads(run_cli("instances", "beta", "--json", cwd=tmp_path).stdout)
    directories = {r["instanceKey"]: Path(r["directory"]) for r in rows}
    assert set(directories) >= {tenant, impostor}
    assert directories[tenant] != directories[impostor]
    assert "alice secret" in conversation_text(directories[tenant])
    assert "alice secret" not in conversation_text(directories[impostor])
    assert "impostor here" not in conversation_text(directories[tenant])

    deleted = run_cli("instances", "delete", "beta", impostor, cwd=tmp_path)
    assert deleted.stdout.strip() == "deleted", deleted.stderr
    assert "alice secret" in conversation_text(directories[tenant])


def test_state_files_are_private_to_the_daemon_user(daemon: Daemon, tmp_path: Path) -> None:
    send(tmp_path, "hello", "u/1")
    state = tmp_path / ".goondan"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    seen = 0
    for root, dirs, files in os.walk(state):
        for name in dirs:
            assert stat.S_IMODE((Path(root) / name).stat().st_mode) & 0o077 == 0, name
        for name in files:
            path = Path(root) / name
            assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, path
            seen += 1
    assert (state / "runtime-events.jsonl").exists()
    assert seen >= 4  # event log, metadata, base and events of the conversation


BASH_SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  apiKey: {valueFrom: {env: MY_MODEL_KEY}}
  script:
    rules:
      - when: {input: "^env$"}
        call: {tool: bash__exec, args: {command: env}}
      - when: {toolResult: bash__exec}
        reply: "{result.stdout}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: shell}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - ref: {kind: Tool, name: bash, package: "@goondan/base"}
      config: {passEnv: [DEPLOY_TARGET]}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/shell
  agents: [Agent/shell]
"""


def test_bash_env_shows_no_provider_key_or_secret(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "goondan.yaml").write_text(BASH_SWARM)
    secrets = {
        "OPENAI_API_KEY": "sk-openai-secret-value",
        "ANTHROPIC_API_KEY": "sk-ant-secret-value",
        "MY_MODEL_KEY": "model-secret-value",
    }
    env = {**os.environ, **secrets, "DEPLOY_TARGET": "staging"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "goondan.yaml", "--input", "env"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PATH=" in done.stdout
    assert "DEPLOY_TARGET=staging" in done.stdout  # what the tool's config names
    for name, value in secrets.items():
        assert value not in done.stdout, name
        assert f"{name}=" not in done.stdout
