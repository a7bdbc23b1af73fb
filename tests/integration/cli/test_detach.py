"""``run --detach`` starts a real daemon in the background and records it; later runs on the
same state use it; ``--state-root`` and ``GOONDAN_STATE_ROOT`` choose where the state lives."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.state_dir import state_dir_under_root
from tests.support.daemon import run_cli, wait_gone
from tests.support.swarm import write_swarm

pytestmark = pytest.mark.timeout(120)


def started_pid(output: str) -> int:
    found = re.search(r"started \(pid (\d+)\)", output)
    assert found is not None, output
    return int(found.group(1))


@contextlib.contextmanager
def detached(directory: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """``run --detach *args`` in ``directory``; its pid, the daemon stopped at the end."""
    done = run_cli("run", "--detach", *args, cwd=directory, env=env)
    assert done.returncode == 0, done.stderr
    pid = started_pid(done.stdout)
    try:
        yield pid
    finally:
        stop(pid)


def stop(pid: int) -> None:
    """SIGTERM its session, then SIGKILL it when it is not gone within a bound."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not wait_gone(pid, 20):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        assert wait_gone(pid, 10)


def test_detach_returns_with_a_daemon_that_a_second_run_reuses(tmp_path: Path) -> None:
    write_swarm(tmp_path)
    with detached(tmp_path) as pid:
        record = json.loads((tmp_path / ".goondan" / "runner.json").read_text())
        assert record["formatVersion"] == 1
        assert record["pid"] == pid
        assert record["bundle"] == str((tmp_path / "goondan.yaml").resolve())
        status = run_cli("status", "--json", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["pid"] == pid

        again = run_cli("run", "--detach", "--input", "hello", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "alpha got: hello"
        once_more = run_cli("run", "--input", "hi", "--json", cwd=tmp_path)
        assert once_more.returncode == 0, once_more.stderr
        assert json.loads(once_more.stdout)["output"] == "alpha got: hi"
        quiet = run_cli("run", "--detach", cwd=tmp_path)
        assert quiet.returncode == 0
        assert f"already running (pid {pid})" in quiet.stdout
        assert json.loads((tmp_path / ".goondan" / "runner.json").read_text())["pid"] == pid


def test_a_stale_record_is_replaced(tmp_path: Path) -> None:
    write_swarm(tmp_path)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(gone.stdout)
    state = tmp_path / ".goondan"
    state.mkdir(mode=0o700)
    stale = {
        "formatVersion": 1,
        "pid": dead,
        "processStart": 1,
        "startedAt": "x",
        "bundle": "b",
        "stateDir": str(state),
        "log": "l",
        "swarm": None,
    }
    (state / "runner.json").write_text(json.dumps(stale))
    with detached(tmp_path) as pid:
        assert pid != dead
        assert json.loads((state / "runner.json").read_text())["pid"] == pid


def test_a_runner_that_cannot_start_is_reported_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text("kind: Bogus\n")
    done = run_cli("run", "--detach", cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    found = re.search(r"the detached daemon \(pid (\d+)\) exited with status 4", done.stderr)
    assert found is not None, done.stderr
    assert "the last lines of its log" in done.stderr
    assert "E_CONFIG_UNKNOWN_KIND" in done.stderr
    assert wait_gone(int(found.group(1)), 10)
    assert not (tmp_path / ".goondan" / "runner.json").exists()


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A state root with a short path: the API socket's path must fit in 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="gr", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_state_root_chooses_the_state_directory(tmp_path: Path, short_root: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_swarm(project)
    root = short_root
    state = state_dir_under_root(root, project / "goondan.yaml")
    assert state.parent == root.resolve() / "workspaces"
    assert state.name.startswith("project-")
    with detached(project, "--state-root", str(root)):
        assert (state / "runner.json").exists()
        assert not (project / ".goondan").exists()
        by_option = run_cli("status", "--state-root", str(root), cwd=project)
        assert by_option.returncode == 0, by_option.stderr
        env = {**os.environ, "GOONDAN_STATE_ROOT": str(root)}
        by_env = run_cli("run", "--input", "via env", cwd=project, env=env)
        assert by_env.returncode == 0, by_env.stderr
        assert by_env.stdout.strip() == "alpha got: via env"
        # --state-dir wins over both: nothing runs there
        elsewhere = run_cli("status", "--state-dir", str(tmp_path / "other"), cwd=project, env=env)
        assert elsewhere.returncode == 5
        beside = run_cli("status", cwd=project)  # no root: .goondan/ beside, where none runs
        assert beside.returncode == 5
