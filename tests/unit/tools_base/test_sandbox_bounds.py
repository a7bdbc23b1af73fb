"""What a sandboxed program may hold of the machine's memory and disk: ``/dev/shm`` counts in
``tmpMiB``, the rest of ``/dev`` is read-only, and the workspace's quota is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tools_base.test_sandbox import BACKENDS, run
from tools_base.sandbox import SandboxLimits, SandboxMode, SandboxPolicy

TMP_MIB = 16


@pytest.mark.parametrize("mode", BACKENDS)
def test_dev_shm_shares_the_bounded_tmp(tmp_path: Path, mode: SandboxMode) -> None:
    policy = SandboxPolicy(limits=SandboxLimits(tmp_mib=TMP_MIB))
    done = run(
        f"head -c {TMP_MIB * 3}M /dev/zero > /dev/shm/big; echo shm=$?; "
        "wc -c < /dev/shm/big; rm -f /dev/shm/big; "
        f"head -c {TMP_MIB // 2}M /dev/zero > /dev/shm/a && "
        f"head -c {TMP_MIB // 2 + 1}M /dev/zero > /tmp/b; echo shared=$?",
        tmp_path,
        mode,
        policy,
    )
    assert "No space left on device" in done.stderr
    lines = done.stdout.split()
    assert lines[0] == "shm=1"
    assert int(lines[1]) <= TMP_MIB * 1024 * 1024
    assert lines[2] == "shared=1"  # /tmp and /dev/shm are one budget, not two


@pytest.mark.parametrize("mode", BACKENDS)
def test_shared_memory_still_works(tmp_path: Path, mode: SandboxMode) -> None:
    program = (
        "from multiprocessing import shared_memory, Lock\n"
        "made = shared_memory.SharedMemory(create=True, size=1 << 20)\n"
        "made.buf[0] = 42\n"
        "seen = shared_memory.SharedMemory(name=made.name)\n"
        "lock = Lock()\n"
        "print(seen.buf[0])\n"
        "seen.close(); made.close(); made.unlink()\n"
    )
    done = run(f"python3 -c '{program}'", tmp_path, mode)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"


@pytest.mark.parametrize("mode", BACKENDS)
def test_the_rest_of_dev_is_read_only(tmp_path: Path, mode: SandboxMode) -> None:
    done = run(
        "touch /dev/planted; mkdir /dev/dir; echo fine > /dev/null && echo null-ok",
        tmp_path,
        mode,
    )
    assert done.stderr.count("Read-only file system") == 2, done.stderr
    assert done.stdout.strip() == "null-ok"
