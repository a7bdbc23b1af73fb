"""A prompt-injected model's `bash` against a real daemon, run as root (a container's usual
user, and this suite's): the program must not be host root. Both backends.

What worked before: the sandbox's user mapped onto host root, so `bash` could write
`/proc/sys/kernel/core_pattern` (a pipe there runs a program as host root on the next crash)
and `vm.*`, and read `/etc/shadow`; and nothing stopped io_uring, keyctl, bpf or a nested user
namespace. A normal program must still work on root's workspace, and the agent read its files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.support.daemon import free_port
from tests.support.sandbox_attack import BACKENDS, BASH_AND_READ_MODEL, AttackSwarm, attack_daemon
from tools_base.sandbox import _seccomp, _userns

pytestmark = pytest.mark.timeout(180)

SWARM = (
    BASH_AND_READ_MODEL
    + """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: mallory}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - {ref: {kind: Tool, name: bash, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: file-system, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/mallory
  agents: [Agent/mallory]
  policy: {sandbox: %(backend)s}
"""
)

SYSCALLS = """
import ctypes, json
nr = %(numbers)s
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    return ctypes.get_errno() if libc.syscall(nr[name], *args) == -1 else 0
print(json.dumps([call("io_uring_setup", 1, 0), call("keyctl", 0, -3), call("bpf", 0, 0, 0),
                  call("unshare", 0x10000000)]))
"""


@pytest.fixture(scope="module", params=BACKENDS)
def swarm(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AttackSwarm]:
    if os.geteuid() != 0:
        pytest.skip("the daemon must run as root for this attack (CI runs as root)")
    directory = tmp_path_factory.mktemp(f"noroot-{request.param}")
    config = SWARM % {"backend": request.param}
    with attack_daemon(directory, config, args=["--listen", f"127.0.0.1:{free_port()}"]) as daemon:
        yield AttackSwarm(directory, daemon, request.param)


def test_the_program_is_an_unprivileged_host_id(swarm: AttackSwarm) -> None:
    out = swarm.bash("cat /proc/self/uid_map; id -u")
    inside, host, count, uid = str(out["stdout"]).split()
    assert (inside, count, uid) == ("1000", "1", "1000")
    assert host == str(_userns.host_ids()[0])
    assert host != "0"


def test_the_kernels_knobs_cannot_be_written(swarm: AttackSwarm) -> None:
    with open("/proc/sys/kernel/core_pattern") as pattern:
        before = pattern.read()
    # Each write puts back the value already there: harmless should it go through.
    out = swarm.bash(
        'v=$(cat /proc/sys/kernel/core_pattern); echo "$v" > /proc/sys/kernel/core_pattern '
        "&& echo CORE; "
        'v=$(cat /proc/sys/vm/swappiness); echo "$v" > /proc/sys/vm/swappiness && echo VM; '
        "test -w /proc/sys/vm/drop_caches && echo DROP; "
        "test -w /proc/sysrq-trigger && echo SYSRQ; "
        "touch /sys/kernel/probe && echo SYS; echo end"
    )
    assert str(out["stdout"]).split() == ["end"]
    with open("/proc/sys/kernel/core_pattern") as pattern:
        assert pattern.read() == before


def test_roots_private_files_are_unreadable(swarm: AttackSwarm) -> None:
    out = swarm.bash(
        "head -c 4 /etc/shadow && echo SHADOW; head -c 4 /etc/gshadow && echo GSHADOW; echo end"
    )
    assert str(out["stdout"]).split() == ["end"]


def test_the_filtered_calls_fail_with_eperm(swarm: AttackSwarm) -> None:
    numbers = json.dumps(_seccomp.SYSCALLS[_seccomp.machine()])
    (swarm.instance_dir() / "workspace").mkdir(parents=True, exist_ok=True)
    script = SYSCALLS % {"numbers": numbers}
    (swarm.instance_dir() / "workspace" / "probe.py").write_text(script)
    out = swarm.bash("python3 -I probe.py; unshare -U true; echo unshare=$?")
    stdout = str(out["stdout"]).splitlines()
    assert json.loads(stdout[0]) == [1, 1, 1, 1]  # EPERM each
    assert stdout[1] != "unshare=0"


def test_a_normal_program_still_works_on_roots_workspace(swarm: AttackSwarm) -> None:
    out = swarm.bash("mkdir -p out && echo 'written inside' > out/made.txt && cat out/made.txt")
    assert out["stdout"] == "written inside\n"
    made = swarm.instance_dir() / "workspace" / "out" / "made.txt"
    assert made.stat().st_uid == 0  # root's on disk: the agent's to use
    assert swarm.send("mallory", "read out/made.txt") == "read written inside"
