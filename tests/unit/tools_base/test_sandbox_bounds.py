"""What a sandboxed program may hold of the machine's memory and disk: ``/dev/shm`` counts in
``tmpMiB``, the rest of ``/dev`` is read-only, and the workspace's quota is measured."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.tool_context import acall, make_ctx
from tools_base import ToolConfigError, ToolContext, ToolError, sandbox
from tools_base.sandbox import SandboxLimits, SandboxMode, SandboxPolicy
from tools_base.sandbox._quota import measure
from tools_base.tools import bash, file_system

TMP_MIB = 16
BACKENDS = [SandboxMode.BWRAP, SandboxMode.NAMESPACES]


def run(
    command: str, workdir: Path, mode: SandboxMode, policy: SandboxPolicy | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` in ``mode``'s sandbox, ``workdir`` its workspace; its output captured."""
    launch = sandbox.prepare(
        ["/bin/sh", "-c", command],
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(workdir),
        workdir=str(workdir),
        policy=policy or SandboxPolicy(),
        mode=mode,
    )
    try:
        return subprocess.run(
            launch.argv,
            env=launch.env,
            preexec_fn=launch.preexec,
            pass_fds=launch.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
    finally:
        launch.close()


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


QUOTA_MIB = 4


def test_disk_mib_from_config() -> None:
    assert SandboxPolicy.from_config("bash", None).limits.disk_mib == 1024
    assert SandboxPolicy.from_config("bash", {"diskMiB": 8}).limits.disk_mib == 8
    assert SandboxPolicy.from_config("bash", {"diskMiB": None}).limits.disk_mib is None
    with pytest.raises(ToolConfigError, match="diskMiB"):
        SandboxPolicy.from_config("bash", {"diskMiB": 0})
    assert file_system.configure({"diskMiB": None})  # null lifts it
    with pytest.raises(ToolConfigError, match="diskMiB"):
        file_system.configure({"diskMiB": "1G"})


def test_the_measure_counts_blocks_and_a_hard_link_once(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").write_bytes(os.urandom(1024 * 1024))
    os.link(tmp_path / "sub" / "a", tmp_path / "b")
    with open(tmp_path / "sparse", "wb") as sparse:
        sparse.truncate(1 << 30)  # a gigabyte of holes takes no disk
    used = measure(str(tmp_path))
    assert 1024 * 1024 <= used < 2 * 1024 * 1024


@pytest.mark.parametrize("mode", BACKENDS)
async def test_bash_past_the_quota_is_ended(
    ctx: ToolContext, workdir: Path, mode: SandboxMode
) -> None:
    sandbox.configure(mode)
    try:
        handlers = bash.configure({"sandbox": {"diskMiB": QUOTA_MIB}})
        with pytest.raises(ToolError) as refused:
            await acall(
                handlers["exec"],
                ctx,
                {"command": "while :; do head -c 1M /dev/zero >> fill.bin; done",
                 "timeoutMs": 30000},
            )  # fmt: skip
        assert refused.value.code == "E_WORKSPACE_QUOTA"
        assert "ended" in str(refused.value)
        # The next write of either Tool is refused too.
        write = file_system.configure({"diskMiB": QUOTA_MIB})["write"]
        with pytest.raises(ToolError) as again:
            write(ctx, {"path": "more.txt", "content": "x" * 1000})
        assert again.value.code == "E_WORKSPACE_QUOTA"
        # Over the quota, a call may still delete, and then the workspace takes writes again.
        out = await acall(handlers["exec"], ctx, {"command": "rm fill.bin && echo freed"})
        assert isinstance(out, dict)
        assert out["stdout"] == "freed\n"
        written = write(ctx, {"path": "more.txt", "content": "x" * 1000})
        assert isinstance(written, dict)
        assert written["written"] is True
    finally:
        sandbox.configure(SandboxMode.AUTO)


def test_file_system_refuses_a_write_past_the_quota(ctx: ToolContext, workdir: Path) -> None:
    write = file_system.configure({"diskMiB": 1})["write"]
    write(ctx, {"path": "a.txt", "content": "a" * 600_000})
    with pytest.raises(ToolError) as refused:
        write(ctx, {"path": "b.txt", "content": "b" * 600_000})
    assert refused.value.code == "E_WORKSPACE_QUOTA"
    assert not (workdir / "b.txt").exists()
    # Lifted, the same write goes through.
    file_system.configure({"diskMiB": None})["write"](ctx, {"path": "b.txt", "content": "b"})


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small disk needs root (as CI runs)")
def test_a_disk_out_of_inodes_counts_as_full(tmp_path: Path) -> None:
    point = tmp_path / "disk"
    point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128m,nr_inodes=12000", "tmpfs", str(point)],
        check=True,
    )
    try:
        ctx = make_ctx(point)
        write = file_system.configure({"diskMiB": None})["write"]
        write(ctx, {"path": "first.txt", "content": "fine"})
        for index in range(2500):  # empty files: no blocks, only inodes
            (point / f"empty-{index}").touch()
        with pytest.raises(ToolError, match="free inodes") as refused:
            write(ctx, {"path": "second.txt", "content": "refused"})
        assert refused.value.code == "E_WORKSPACE_QUOTA"
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


async def test_a_stopped_walk_leaves_no_figure_a_guard_would_trust(tmp_path: Path) -> None:
    from tools_base.sandbox._quota import Guard

    for n in range(4):  # a directory each: the walk stops between directories
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "f").write_bytes(os.urandom(512 * 1024))
    whole = measure(str(tmp_path))
    part = measure(str(tmp_path), stop_above=600 * 1024)  # stops: a lower bound only
    assert part < whole
    # A server started again at once is allowed what is there, not the lower bound.
    guard = Guard(str(tmp_path), disk_mib=1)
    await guard.before()
    assert guard.allowance >= whole
