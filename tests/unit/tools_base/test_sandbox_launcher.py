"""The sandbox's launcher command line (``Launch.launcher_argv``), as code that spawns the
program itself starts it (the MCP bridge, through the ``mcp`` SDK): no descriptor of its
starter reaches the program, and no value of the program's environment is on a command line."""

from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tools_base import sandbox
from tools_base.sandbox import SandboxMode, SandboxPolicy

pytestmark = pytest.mark.timeout(60)

STRAY_FD_FLOOR = 57
"""Where the starter's stray descriptor sits, or the first free number past it (uvloop passes
such ones on); never one the test process holds, which ``dup2`` would close under it."""


@pytest.mark.parametrize("mode", [SandboxMode.BWRAP, SandboxMode.NAMESPACES], ids=str)
def test_the_launcher_passes_neither_descriptors_nor_values_on(
    tmp_path: Path, mode: SandboxMode
) -> None:
    found = sandbox.probe(mode)
    if not found.available:
        pytest.skip(f"no {mode} sandbox on this machine: {found.reason}")
    value = secrets.token_hex(8)
    launch = sandbox.prepare(
        ["/bin/sh", "-c", 'echo "$FIXTURE_TOKEN"; ls /proc/self/fd'],
        env={"PATH": "/usr/bin:/bin", "FIXTURE_TOKEN": value},
        cwd=str(tmp_path),
        workdir=str(tmp_path),
        policy=SandboxPolicy(),
        mode=mode,
    )
    assert value not in " ".join(launch.launcher_argv)
    read_end, write_end = os.pipe()
    stray = fcntl.fcntl(write_end, fcntl.F_DUPFD, STRAY_FD_FLOOR)
    try:
        done = subprocess.run(
            launch.launcher_argv,
            env=launch.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            pass_fds=(stray,),
        )
    finally:
        launch.close()
        for fd in (read_end, write_end, stray):
            os.close(fd)
    assert done.returncode == 0, done.stderr
    token, *fds = done.stdout.split()
    assert token == value
    assert set(fds) <= {"0", "1", "2", "3"}  # 3: the directory ls reads
