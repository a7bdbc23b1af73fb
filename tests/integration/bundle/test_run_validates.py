"""``run`` (one-shot, daemon, ``--detach``) and ``node`` refuse what ``validate`` refuses: the
same errors, exit 4, and no agent process started; configuration errors come before a missing
secret (exit 6)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.daemon import run_cli, wait_gone
from tests.support.studio import EXAMPLE

pytestmark = pytest.mark.timeout(300)

GIVE_UP_SECONDS = 120
"""Bounds each command: a run that starts agents and retries them never ends by itself."""
CLEAN = {k: v for k, v in os.environ.items() if k != "TELEGRAM_BOT_TOKEN"}

NOTES_TOOL = """\
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: notes}
spec:
  entry: notes.py
  exports:
    - name: jot
      description: Jot a note down.
      parameters: {type: object, properties: {}}
"""
SCHEDULE = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: clock}
spec:
  connectorRef: {kind: Connector, name: schedule, package: "@goondan/base"}
  config:
    schedules:
      value: |
        - {name: digest, cron: "0 9 * * 1-5", timezone: Mars/Olympus_Mons, text: digest}
"""
TELEGRAM = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: chat}
spec:
  connectorRef: {kind: Connector, name: telegram, package: "@goondan/base"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: TELEGRAM_BOT_TOKEN}}
"""
AGENTS_TOOL = '    - ref: { kind: Tool, name: agents, package: "@goondan/base" }\n'


def swarm_with_notes(directory: Path, module: str, *more: str) -> Path:
    """The example swarm whose coordinator also has Tool/notes, implemented by ``module``."""
    text = EXAMPLE.read_text().replace(AGENTS_TOOL, AGENTS_TOOL + "    - ref: Tool/notes\n", 1)
    (directory / "goondan.yaml").write_text(text + NOTES_TOOL + "".join(more))
    (directory / "notes.py").write_text(module)
    return directory


LOOPING = """\
pathlib.Path(__file__).with_name("looping.pid").write_text(str(os.getpid()))
while True:
    pass
"""
LACKS_JOT = "def other(args, ctx):\n    return {}\n\nhandlers = {'other': other}\n"


def no_handler(directory: Path) -> Path:
    return swarm_with_notes(directory, LACKS_JOT)


def bad_schedule(directory: Path) -> Path:
    (directory / "goondan.yaml").write_text(EXAMPLE.read_text() + SCHEDULE)
    return directory


def validate_errors(directory: Path) -> list[str]:
    """The error lines ``validate`` prints (its exit status checked: 4)."""
    done = run_cli("validate", cwd=directory, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1].endswith("in goondan.yaml")
    return [line for line in lines[:-1] if not line.startswith("warning: ")]


def assert_no_agent_started(directory: Path) -> None:
    logs = directory / ".goondan" / "logs"
    started = sorted(p.name for p in logs.glob("agent:*")) if logs.exists() else []
    assert started == []
    events = directory / ".goondan" / "runtime-events.jsonl"
    assert not events.exists() or "process.spawned" not in events.read_text()


@pytest.mark.parametrize("make", [no_handler, bad_schedule], ids=["handler", "connection-config"])
def test_run_input_refuses_with_validates_errors_and_starts_no_agent(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    here = make(tmp_path)
    expected = validate_errors(here)
    assert any("goondan.yaml:" in line for line in expected)  # file and line named

    ran = run_cli("run", "--input", "write a.txt hi", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    assert ran.stdout == ""
    for line in expected:
        assert line in ran.stderr.splitlines()
    assert_no_agent_started(here)


def test_run_json_reports_the_errors_as_validate_json_does(tmp_path: Path) -> None:
    here = no_handler(tmp_path)
    checked = run_cli("validate", "--json", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    ran = run_cli("run", "--input", "hi", "--json", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    answer, verdict = json.loads(ran.stdout), json.loads(checked.stdout)
    assert (ran.returncode, answer["exitCode"]) == (4, 4)
    assert answer["errors"] == verdict["errors"]
    [error] = answer["errors"]
    assert (error["code"], error["resource"], error["field"]) == (
        "E_CONFIG_HANDLER_MISSING",
        "Tool/notes",
        "spec.exports[0].name",
    )
    assert answer["error"]["code"] == "VALIDATION_ERROR"


def test_the_daemon_exits_4_instead_of_retrying_an_agent_that_cannot_boot(
    tmp_path: Path,
) -> None:
    here = no_handler(tmp_path)
    expected = validate_errors(here)
    ran = run_cli("run", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    for line in expected:
        assert line in ran.stderr.splitlines()
    assert_no_agent_started(here)


def test_run_detach_reports_the_errors_and_validates_exit_status(tmp_path: Path) -> None:
    here = no_handler(tmp_path)
    expected = validate_errors(here)
    ran = run_cli("run", "--detach", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    assert "exited with status 4 before it was ready" in ran.stderr
    for line in expected:
        assert f"  | {line}" in ran.stderr.splitlines()
    assert_no_agent_started(here)


def test_a_module_that_exits_while_imported_is_refused_as_validate_refuses_it(
    tmp_path: Path,
) -> None:
    here = swarm_with_notes(tmp_path, "import os\nos._exit(0)\n")
    expected = validate_errors(here)
    assert any("without a verdict" in line for line in expected)
    ran = run_cli("run", "--input", "hi", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    assert "the import check ended (exit code 0) without a verdict" in ran.stderr
    assert_no_agent_started(here)


def test_a_module_that_loops_while_imported_is_refused_after_the_deadline(
    tmp_path: Path,
) -> None:
    module = "import os, pathlib\n" + LOOPING
    here = swarm_with_notes(tmp_path, module)
    env = {**CLEAN, "GOONDAN_VALIDATE_TIMEOUT": "3"}
    ran = run_cli("run", "--input", "hi", cwd=here, env=env, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    assert "the import check did not finish within 3 s" in ran.stderr
    assert_no_agent_started(here)
    looping = int((here / "looping.pid").read_text())
    assert wait_gone(looping)  # the looping check was killed, not left behind


def test_configuration_errors_come_before_a_missing_secret(tmp_path: Path) -> None:
    here = swarm_with_notes(tmp_path, LACKS_JOT, TELEGRAM)
    ran = run_cli("run", "--input", "hi", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 4, ran.stderr
    assert "E_CONFIG_HANDLER_MISSING" in ran.stderr
    assert "TELEGRAM_BOT_TOKEN" not in ran.stderr

    (here / "notes.py").write_text("handlers = {'jot': lambda args, ctx: {}}\n")
    ran = run_cli("run", "--input", "hi", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 6, ran.stderr  # valid now: the secret is what is missing


def test_a_cluster_node_refuses_before_it_connects(tmp_path: Path) -> None:
    pytest.importorskip("nats")
    here = no_handler(tmp_path)
    expected = validate_errors(here)
    # Nothing listens on port 9: a node that tried to connect would fail otherwise (exit 5).
    ran = run_cli(
        "node",
        "--name",
        "n1",
        "--cluster",
        "nats://127.0.0.1:9",
        cwd=here,
        env=CLEAN,
        timeout=GIVE_UP_SECONDS,
    )
    assert ran.returncode == 4, ran.stderr
    for line in expected:
        assert line in ran.stderr.splitlines()


def test_a_module_that_prints_while_imported_is_valid_and_stays_out_of_the_answer(
    tmp_path: Path,
) -> None:
    module = "print('imported notes')\n\nhandlers = {'jot': lambda args, ctx: {}}\n"
    here = swarm_with_notes(tmp_path, module)
    checked = run_cli("validate", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert checked.returncode == 0, checked.stderr
    ran = run_cli("run", "--input", "write a.txt hi", cwd=here, env=CLEAN, timeout=GIVE_UP_SECONDS)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.endswith("\nDone. The worker reports: wrote 2 bytes to a.txt\n")
    # Once: the coordinator's own print at its boot, mirrored from its log; the check's none.
    assert ran.stdout.count("imported notes") == 1
