"""A spawned instance's workdir swapped for a symlink, against a real daemon, on each backend of
the sandbox (bubblewrap, and the kernel's namespaces).

The attack: an agent with ``bash``, ``agents`` and ``file-system`` spawns an instance into a
folder of its own workspace, then its ``bash`` replaces that folder with a symlink to another
host folder, or to the state directory. It worked while the workdir was a path: the spawned
instance's ``file-system`` read and wrote wherever the link pointed, and its sandboxed ``bash``
had the link's target bound read-write. Now the workdir is pinned by descriptor when the
instance loads, and every call checks the path still names it: each is refused with
``E_SPAWN_CWD_REFUSED``, and nothing outside is read or written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.sandbox_attack import BACKENDS, AttackSwarm, attack_daemon

pytestmark = pytest.mark.timeout(300)

SECRET = "host-secret-5e1f0c"
VICTIM_NOTE = "the victim's own note"
REFUSED = "refused E_SPAWN_CWD_REFUSED"

SWARM = r"""
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^spawn (?P<key>\\S+) cwd=(?P<cwd>\\S+)$"}
        call: {tool: agents__spawn, args: {target: worker, instanceKey: "{key}", cwd: "{cwd}"}}
      - when: {input: "^run (?P<command>[\\s\\S]+)$"}
        call: {tool: bash__exec, args: {command: "{command}", timeoutMs: 20000}}
      - when: {input: "^read (?P<path>\\S+)$"}
        call: {tool: file-system__read, args: {path: "{path}"}}
      - when: {input: "^write (?P<path>\\S+) (?P<text>.+)$"}
        call: {tool: file-system__write, args: {path: "{path}", content: "{text}"}}
      - when: {status: error}
        reply: "refused {errorCode}"
      - when: {toolResult: file-system__read}
        reply: "read {result.content}"
      - when: {status: ok}
        reply: "{result}"
      - reply: "idle"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: mallory}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: agents, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/mallory
  agents: [Agent/mallory, Agent/worker]
  policy: {sandbox: BACKEND}
"""


@dataclass
class Swarm(AttackSwarm):
    outside: Path

    @property
    def workspace(self) -> Path:
        """Mallory's workspace, where she spawns."""
        return self.instance_dir() / "workspace"

    def spawn_and_swap(self, key: str, target: Path) -> None:
        """Spawn ``worker/key`` into ``jobs/key`` of Mallory's workspace, check it works there,
        then have Mallory's ``bash`` replace the folder with a symlink to ``target``."""
        spawned = json.loads(self.send("mallory", f"spawn {key} cwd=jobs/{key}"))
        assert spawned["spawned"] is True, spawned
        assert spawned["cwd"] == str((self.workspace / "jobs" / key).resolve())
        # Before the swap the instance works in its workdir, with both tools.
        assert "written" in self.send("worker", "write before.txt mine", key)
        ran = json.loads(self.run("cat before.txt; pwd", "worker", key))
        assert ran["stdout"] == f"mine{spawned['cwd']}\n", ran
        swapped = json.loads(self.run(f"mv jobs/{key} jobs/{key}.old && ln -s {target} jobs/{key}"))
        assert swapped["exitCode"] == 0, swapped
        assert (self.workspace / "jobs" / key).is_symlink()


@pytest.fixture(scope="module", params=BACKENDS)
def swarm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swarm]:
    directory = tmp_path_factory.mktemp(f"swap-{request.param}")
    outside = tmp_path_factory.mktemp(f"host-folder-{request.param}")
    (outside / "secret.txt").write_text(SECRET)
    with attack_daemon(directory, SWARM.replace("BACKEND", request.param)) as daemon:
        yield Swarm(directory, daemon, request.param, outside)


def test_a_workdir_swapped_for_a_link_to_a_host_folder_is_refused(swarm: Swarm) -> None:
    swarm.spawn_and_swap("job-host", swarm.outside)

    assert swarm.send("worker", "read secret.txt", "job-host") == REFUSED
    assert swarm.send("worker", "write planted.txt by-the-worker", "job-host") == REFUSED
    assert swarm.send("worker", "read before.txt", "job-host") == REFUSED
    ran = swarm.run("cat secret.txt; echo by-bash > planted-by-bash.txt; ls", "worker", "job-host")
    assert ran == REFUSED
    assert sorted(p.name for p in swarm.outside.iterdir()) == ["secret.txt"]
    assert (swarm.outside / "secret.txt").read_text() == SECRET

    # Put back, the directory the instance was given serves it again (the same inode).
    restored = json.loads(swarm.run("rm jobs/job-host && mv jobs/job-host.old jobs/job-host"))
    assert restored["exitCode"] == 0, restored
    assert swarm.send("worker", "read before.txt", "job-host") == "read mine"
    assert json.loads(swarm.run("cat before.txt", "worker", "job-host"))["stdout"] == "mine"


def test_a_workdir_swapped_for_a_link_to_the_state_directory_is_refused(swarm: Swarm) -> None:
    victim = swarm.state / "agents" / "worker" / "instances" / "victim" / "workspace"
    assert "written" in swarm.send("worker", f"write note.txt {VICTIM_NOTE}", "victim")
    assert (victim / "note.txt").read_text() == VICTIM_NOTE
    swarm.spawn_and_swap("job-state", swarm.state)
    events = swarm.state / "runtime-events.jsonl"
    assert events.exists()

    assert swarm.send("worker", "read runtime-events.jsonl", "job-state") == REFUSED
    note = "agents/worker/instances/victim/workspace/note.txt"
    assert swarm.send("worker", f"read {note}", "job-state") == REFUSED
    assert swarm.send("worker", f"write {note} overwritten", "job-state") == REFUSED
    ran = swarm.run(
        f"head -c 200 runtime-events.jsonl; echo overwritten > {note}", "worker", "job-state"
    )
    assert ran == REFUSED
    # Nor does it lend the state directory to an instance it spawns.
    deeper = swarm.send(
        "worker", "spawn job-deeper cwd=agents/worker/instances/victim", "job-state"
    )
    assert deeper == REFUSED
    assert (victim / "note.txt").read_text() == VICTIM_NOTE
    assert not (swarm.state / "planted.txt").exists()
    assert not (swarm.state / "agents" / "worker" / "instances" / "job-deeper").exists()


def test_a_workdir_replaced_by_another_directory_is_refused(swarm: Swarm) -> None:
    """Not a symlink: a fresh directory of the same name (the pinned one moved aside)."""
    spawned = json.loads(swarm.send("mallory", "spawn job-moved cwd=jobs/job-moved"))
    assert "written" in swarm.send("worker", "write before.txt mine", "job-moved")
    moved = json.loads(swarm.run("mv jobs/job-moved jobs/elsewhere && mkdir jobs/job-moved"))
    assert moved["exitCode"] == 0, moved
    assert swarm.send("worker", "write after.txt x", "job-moved") == REFUSED
    assert swarm.run("touch after-bash.txt", "worker", "job-moved") == REFUSED
    assert list(Path(spawned["cwd"]).iterdir()) == []
