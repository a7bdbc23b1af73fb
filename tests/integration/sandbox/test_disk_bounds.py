"""A prompt-injected model's `bash` against a real daemon, going for the machine's memory and
disk: `/dev/shm` is bounded by `tmpMiB`, a workspace by its `diskMiB`, and a disk filled to the
last byte still takes every other agent's conversation. Run with each backend of the sandbox.

Each attack is one that worked before: 300 MiB parked in `/dev/shm` (a tmpfs of half the RAM),
and one `bash` call filling the file system of the state directory, after which every other
agent's Turn failed with `E_STORAGE`. The disk-full case runs on a small tmpfs mounted for the
test (root only, as CI runs), never on the machine's own disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from goondan.reserve import DEFAULT_RESERVE_MIB
from goondan.state_files.conversation import read_messages
from tests.support.daemon import run_cli
from tests.support.sandbox_attack import BACKENDS, AttackSwarm, attack_daemon

pytestmark = pytest.mark.timeout(240)

QUOTA_MIB = 16
TMP_MIB = 32
SMALL_DISK_MIB = 200

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
      - when: {input: "^write (?P<path>\\\\S+) (?P<content>.+)$"}
        call: {tool: file-system__write, args: {path: "{path}", content: "{content}"}}
      - when: {toolResult: bash__exec, status: ok}
        reply: "{result}"
      - when: {toolResult: file-system__write, status: ok}
        reply: "written"
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
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"},
       config: {sandbox: {diskMiB: %(quota)s, tmpMiB: %(tmp)d, fileSizeMiB: null}}}
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"},
       config: {diskMiB: %(quota)s}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: victim}
spec:
  modelConfig: {modelRef: Model/brain}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/mallory
  agents: [Agent/mallory, Agent/victim]
  policy: {sandbox: %(backend)s}
"""


class Swarm(AttackSwarm):
    def victim_answers(self, text: str) -> None:
        """Another agent's Turn answers, and its conversation is on disk."""
        assert self.send("victim", text) == "idle"
        conversation = self.instance_dir("victim") / "conversation"
        assert text in json.dumps(read_messages(conversation))


@contextlib.contextmanager
def _running(
    directory: Path, backend: str, quota: str, env: dict[str, str] | None = None
) -> Iterator[Swarm]:
    config = SWARM % {"backend": backend, "quota": quota, "tmp": TMP_MIB}
    with attack_daemon(directory, config, env=env) as daemon:
        yield Swarm(directory, daemon, backend)


@pytest.fixture(scope="module", params=BACKENDS)
def swarm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swarm]:
    with _running(tmp_path_factory.mktemp(f"bounds-{request.param}"), request.param, "16") as on:
        yield on


def test_dev_shm_is_bounded_by_tmp_mib(swarm: Swarm) -> None:
    out = swarm.bash(
        f"head -c {TMP_MIB * 4}M /dev/zero > /dev/shm/parked; echo rc=$?; "
        "wc -c < /dev/shm/parked; rm -f /dev/shm/parked; touch /dev/planted; "
        "python3 -c 'from multiprocessing import shared_memory as s; "
        'm = s.SharedMemory(create=True, size=4096); print("shm", m.name); m.unlink()\''
    )
    stdout, stderr = str(out["stdout"]).split(), str(out["stderr"])
    assert stdout[0] == "rc=1"
    assert int(stdout[1]) <= TMP_MIB * 1024 * 1024
    assert "No space left on device" in stderr
    assert "Read-only file system" in stderr  # the rest of /dev takes nothing
    assert stdout[2] == "shm"  # POSIX shared memory still works


def test_a_call_past_the_disk_quota_is_ended(swarm: Swarm) -> None:
    answer = swarm.send("mallory", "run while :; do head -c 1M /dev/zero >> fill.bin || exit; done")
    assert answer == "refused E_WORKSPACE_QUOTA"
    # The answer is the quota's, not the 60 s timeout's: the watcher ended the call. How far
    # past the quota it got depends on the machine's speed between two looks, so it is not
    # asserted here (the unit tests bound one look's measurement).
    workspace = swarm.instance_dir() / "workspace"
    assert (workspace / "fill.bin").stat().st_size > QUOTA_MIB * 1024 * 1024
    assert swarm.send("mallory", "write more.txt one more line") == "refused E_WORKSPACE_QUOTA"
    assert not (workspace / "more.txt").exists()
    swarm.victim_answers("hello after the quota")
    # Over the quota, a call may delete; then the workspace takes writes again.
    assert swarm.bash("rm fill.bin && echo freed")["stdout"] == "freed\n"
    assert swarm.send("mallory", "write more.txt one more line") == "written"


@contextlib.contextmanager
def _small_disk() -> Iterator[Path]:
    """A tmpfs of :data:`SMALL_DISK_MIB` mounted on a fresh directory, unmounted after."""
    mount_point = Path(tempfile.mkdtemp(prefix="goondan-small-disk-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_MIB}m,mode=0755", "tmpfs",
         str(mount_point)],
        check=True,
    )  # fmt: skip
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        with contextlib.suppress(OSError):
            mount_point.rmdir()


def _fill(path: Path) -> None:
    """Write ``path`` until the disk is full (the test's own process: outside every quota)."""
    block = bytes(1024 * 1024)
    with open(path, "wb", buffering=0) as out:
        for size in (len(block), 4096):  # then the last bytes a block's tail still takes
            try:
                while out.write(block[:size]):
                    pass
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small disk needs root (as CI runs)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_disk_still_takes_the_other_agents_turns(backend: str) -> None:
    with _small_disk() as disk:
        directory = disk / "swarm"
        directory.mkdir()
        # The default reserve, not the suite's smaller one (tests/conftest.py).
        reserve = {"GOONDAN_STATE_RESERVE_MIB": str(DEFAULT_RESERVE_MIB)}
        full = DEFAULT_RESERVE_MIB * 1024 * 1024
        with _running(directory, backend, "null", reserve) as swarm:
            swarm.daemon.wait_for("state reserve held", deadline=30)
            assert (swarm.state / ".space-reserve").stat().st_size == full
            swarm.victim_answers("hello before")
            # Mallory's program, without a quota, goes for the whole disk: ended at the floor.
            answer = swarm.send("mallory", "run head -c 1G /dev/zero > fill.bin; sleep 30")
            assert answer == "refused E_WORKSPACE_QUOTA"
            # Then something outside the runtime takes the rest, to the last block.
            _fill(disk / "filler.bin")
            assert os.statvfs(disk).f_bavail == 0
            swarm.victim_answers("hello on a full disk")
            # The Turn's writes met the full disk and gave part of the reserve back: maybe
            # after its answer (an instance's status is recorded by a thread of the agent's).
            swarm.daemon.wait_for("state reserve released: the disk is full", process=None)
            assert (swarm.state / ".space-reserve").stat().st_size < full
            # Mallory's next call is refused before it starts: the disk is full.
            assert swarm.send("mallory", "run echo hi") == "refused E_WORKSPACE_QUOTA"
            swarm.victim_answers("hello again")


def test_doctor_says_how_the_disk_quota_holds(swarm: Swarm) -> None:
    done = run_cli("doctor", cwd=swarm.directory, timeout=120)
    line = next(ln for ln in done.stdout.splitlines() if "sandbox disk" in ln)
    assert "measured" in line
    assert "project quotas" in line
