"""What the daemon hands the processes it starts of its environment (orchestrator.environment)."""

from __future__ import annotations

import gc
import os
import secrets
import subprocess
import sys
from multiprocessing import util

import pytest

from bundle.plan import ConnectionPlan
from orchestrator.environment import (
    child_environment,
    launch_environment,
    use_clean_launches,
    withhold,
)

DAEMON = {
    "PATH": "/usr/bin:/bin",
    "LC_ALL": "C.UTF-8",
    "PYTHONPATH": "/srv/swarm",
    "GOONDAN_LOG_LEVEL": "debug",
    "GOONDAN_API_TOKEN": "the-api-token",
    "OPENAI_API_KEY": "sk-somebody-elses",
    "HOOK_SECRET": "hook-secret",
    "HOOK_PORT": "8080",
    "NOTIFY_SOCKET": "/run/systemd/notify",
}


def plan(*names: str) -> ConnectionPlan:
    return ConnectionPlan(
        swarm_name="s",
        connection_name="hook",
        connector_name="webhook",
        entry_path="/x.py",
        events=["e"],
        state_dir="/state",
        environment=list(names),
    )


def test_the_fork_server_gets_the_base_variables_only() -> None:
    assert launch_environment(DAEMON) == {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": "/srv/swarm",
        "GOONDAN_LOG_LEVEL": "debug",
    }


def test_a_child_gets_the_base_and_what_its_plan_names() -> None:
    assert child_environment(plan("HOOK_*"), DAEMON) == {
        **launch_environment(DAEMON),
        "HOOK_SECRET": "hook-secret",
        "HOOK_PORT": "8080",
    }


def test_a_withheld_value_reaches_no_child_whatever_names_it() -> None:
    token = secrets.token_hex(8)
    environ = {**DAEMON, "GOONDAN_API_TOKEN": token, "ALIAS": token, "LANG": token}
    withhold(token)
    assert child_environment(plan("GOONDAN_*", "ALIAS"), environ) == {
        **launch_environment(DAEMON),
    }
    assert "LANG" not in launch_environment(environ)
    withhold("")  # nothing is withheld for an empty value: empty variables stay
    assert child_environment(plan("EMPTY"), {"EMPTY": ""}) == {"EMPTY": ""}


def test_multiprocessing_launches_get_the_base_environment_and_stay_unreaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(util, "spawnv_passfds", util.spawnv_passfds)  # restored afterwards
    monkeypatch.setenv("GOONDAN_API_TOKEN", "launch-token")
    monkeypatch.setenv("SOME_MODEL_KEY", "launch-key")
    use_clean_launches()
    read, write = os.pipe()
    program = f"import os; os.write({write}, open('/proc/self/environ', 'rb').read())"
    try:
        # as the fork server is started: the descriptors it needs passed, by number
        pid = util.spawnv_passfds(sys.executable, [sys.executable, "-c", program], [write])
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as pipe:
        environ = pipe.read()
    assert b"launch-token" not in environ
    assert b"launch-key" not in environ
    assert f"PATH={os.environ['PATH']}".encode() in environ.split(b"\0")
    # multiprocessing waits for it by pid: nothing else may have reaped it meanwhile
    gc.collect()
    subprocess.run(["true"], check=True)  # a Popen reaps the dropped Popens it knows of
    assert os.waitpid(pid, 0)[0] == pid
