"""The sandbox binds the workdir's descriptor, not its path: a workdir swapped for a symlink
after it was opened still puts the opened directory in the sandbox, on each backend, and the
descriptor itself does not reach the program."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools_base import sandbox
from tools_base.sandbox import SandboxMode, SandboxPolicy

BACKENDS = [SandboxMode.BWRAP, SandboxMode.NAMESPACES]


@pytest.mark.parametrize("mode", BACKENDS)
def test_the_opened_directory_is_bound_whatever_its_path_names_now(
    tmp_path: Path, mode: SandboxMode
) -> None:
    work = tmp_path / "ws" / "job"
    work.mkdir(parents=True)
    (work / "mine.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    os.rename(work, tmp_path / "ws" / "job.old")
    work.symlink_to(outside)  # what the spawner's bash does after the instance loaded
    try:
        launch = sandbox.prepare(
            ["/bin/sh", "-c",
             "cat mine.txt; cat secret.txt; echo x > planted; pwd; "
             "for f in /proc/$$/fd/*; do readlink $f; done"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(work),
            workdir=str(work),
            policy=SandboxPolicy(),
            mode=mode,
            workdir_fd=fd,
        )  # fmt: skip
        if mode is SandboxMode.BWRAP and os.geteuid() != 0:
            at = launch.argv.index("--bind-fd")
            assert launch.argv[at : at + 3] == ["--bind-fd", str(fd), str(work)]
            assert fd in launch.pass_fds
        elif mode is SandboxMode.BWRAP:  # root: bound from an idmapped copy made from ``fd``
            assert "--bind-fd" not in launch.argv
            assert fd not in launch.pass_fds
        try:
            done = subprocess.run(
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
    finally:
        os.close(fd)
    lines = done.stdout.splitlines()
    assert lines[0] == f"mine{work}", done  # the opened directory, at the instance's path
    assert "secret" not in done.stdout
    assert not (outside / "planted").exists()
    assert (tmp_path / "ws" / "job.old" / "planted").read_text() == "x\n"
    # The program holds no descriptor of its workdir (only 0-2 and the shell's own).
    assert not [line for line in lines[1:] if "job" in line], done.stdout


def test_a_bubblewrap_without_bind_fd_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system bwrap older than 0.8 cannot bind a descriptor: the probe, which binds its
    workdir as every call does, passes it over for the namespaces. (Under a root daemon the
    workdir is bound from a staged idmapped copy of the descriptor, by path: no --bind-fd, so
    such a bubblewrap serves.)"""
    real = sandbox.bwrap_path()
    assert real is not None
    old = tmp_path / "bwrap"
    old.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --bind-fd ] && '
        '{ echo "bwrap: Unknown option --bind-fd" >&2; exit 1; }; done\n'
        f'exec {real} "$@"\n'
    )
    old.chmod(0o755)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: str(old))
    sandbox.probe.cache_clear()
    try:
        found = sandbox.probe(SandboxMode.AUTO)
        if os.geteuid() == 0:
            assert found.backend is SandboxMode.BWRAP, found
        else:
            assert found.backend is SandboxMode.NAMESPACES
            assert "Unknown option --bind-fd" in found.reason
    finally:
        sandbox.probe.cache_clear()
