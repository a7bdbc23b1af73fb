"""bash: exit codes, timeouts that kill the whole process group, output caps, the workdir."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.support.tool_context import (
    MARK,
    acall,
    kill_if_alive,
    processes_marked,
    read_fifo,
    wait_process_gone,
)
from tools_base import ToolConfigError, ToolContext, ToolError
from tools_base.tools import bash
from tools_base.tools.bash import configure

exec_ = bash.handlers["exec"]
script = bash.handlers["script"]

SHELL_START_MS = 2000
"""A timeout long enough for a shell to start and print its child's pid on a loaded machine."""


async def run(ctx: ToolContext, **args: Any) -> dict[str, Any]:
    out = await acall(exec_, ctx, args)
    assert isinstance(out, dict)
    return out


async def test_exec_returns_stdout_stderr_and_exit_code(ctx: ToolContext, workdir: Path) -> None:
    out = await run(ctx, command="echo hi; echo oops >&2; exit 3")
    assert out["stdout"] == "hi\n"
    assert out["stderr"] == "oops\n"
    assert out["exitCode"] == 3
    assert out["signal"] is None
    assert out["timedOut"] is False
    assert out["truncated"] is False
    assert out["command"] == "echo hi; echo oops >&2; exit 3"
    assert out["cwd"] == str(workdir)
    assert isinstance(out["durationMs"], int)


async def test_exec_runs_in_the_workdir_and_in_a_relative_cwd(
    ctx: ToolContext, workdir: Path, real_workdir: str
) -> None:
    (workdir / "sub").mkdir()
    assert (await run(ctx, command="pwd -P"))["stdout"].strip() == real_workdir
    out = await run(ctx, command="pwd -P", cwd="sub")
    assert out["stdout"].strip() == f"{real_workdir}/sub"


@pytest.mark.parametrize("cwd", ["..", "../outside", "/", "sub/../.."])
async def test_exec_refuses_a_cwd_outside_the_workdir(
    ctx: ToolContext, outside: Path, cwd: str
) -> None:
    with pytest.raises(ToolError) as exc_info:
        await run(ctx, command="touch escaped", cwd=cwd)
    assert exc_info.value.code == "E_BASH_PATH_OUTSIDE_WORKDIR"
    assert exc_info.value.suggestion
    assert not (outside / "escaped").exists()


async def test_exec_refuses_a_cwd_symlink_pointing_outside(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "link").symlink_to(outside)
    with pytest.raises(ToolError) as exc_info:
        await run(ctx, command="pwd", cwd="link")
    assert exc_info.value.code == "E_BASH_PATH_OUTSIDE_WORKDIR"


async def test_exec_allows_outside_cwd_when_configured(ctx: ToolContext, outside: Path) -> None:
    handler = configure({"allowOutsideWorkdir": True})["exec"]
    out = await acall(handler, ctx, {"command": "cat secret.txt", "cwd": "../outside"})
    assert isinstance(out, dict)
    assert out["stdout"] == "top secret"


async def test_exec_missing_cwd(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as exc_info:
        await run(ctx, command="true", cwd="nope")
    assert exc_info.value.code == "E_BASH_CWD_NOT_FOUND"


def unique_sleep() -> tuple[str, str]:
    """A ``sleep`` command, and a token no other test uses to find its processes by (the
    call's ``env`` carries it: see ``processes_marked``)."""
    return "sleep 60", secrets.token_hex(8)


async def test_timeout_kills_the_whole_process_group(ctx: ToolContext, workdir: Path) -> None:
    # The shell starts a background grandchild, says so and waits for it. The timeout leaves a
    # loaded machine time to start the shell before it fires.
    sleep, token = unique_sleep()
    os.mkfifo(workdir / "ready.fifo")
    task = asyncio.create_task(
        run(
            ctx,
            command=f"{sleep} & echo go > ready.fifo; wait",
            timeoutMs=SHELL_START_MS,
            env={MARK: token},
        )
    )
    await read_fifo(workdir / "ready.fifo")
    grandchildren = processes_marked(token)
    try:
        assert grandchildren
        out = await task
        assert out["timedOut"] is True
        assert out["exitCode"] == -1
        assert out["signal"] in ("SIGTERM", "SIGKILL")  # killed, not waited for
        for pid in grandchildren:
            await wait_process_gone(pid)
    finally:
        for pid in grandchildren:
            kill_if_alive(pid)


async def test_timeout_escalates_to_sigkill_for_a_process_ignoring_sigterm(
    ctx: ToolContext, workdir: Path
) -> None:
    sleep, token = unique_sleep()
    os.mkfifo(workdir / "ready.fifo")
    command = f"trap '' TERM; sh -c 'trap \"\" TERM; {sleep}' & echo go > ready.fifo; wait"
    task = asyncio.create_task(
        run(ctx, command=command, timeoutMs=SHELL_START_MS, env={MARK: token})
    )
    await read_fifo(workdir / "ready.fifo")
    children = processes_marked(token)
    try:
        assert children
        out = await task
        assert out["timedOut"] is True
        assert out["exitCode"] == -1
        # The shell ignores SIGTERM too: only the escalation ends it.
        assert out["signal"] == "SIGKILL"
        for pid in children:
            await wait_process_gone(pid)
    finally:
        for pid in children:
            kill_if_alive(pid)


async def test_cancellation_kills_the_process_group(ctx: ToolContext, workdir: Path) -> None:
    sleep, token = unique_sleep()
    os.mkfifo(workdir / "ready.fifo")
    task = asyncio.create_task(
        run(ctx, command=f"{sleep} & echo go > ready.fifo; wait", timeoutMs=0, env={MARK: token})
    )
    # Reading the FIFO blocks until the command started its child: an event, not a sleep.
    await read_fifo(workdir / "ready.fifo")
    pids = processes_marked(token)
    try:
        assert pids
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for pid in pids:
            await wait_process_gone(pid)
    finally:
        for pid in pids:
            kill_if_alive(pid)


async def test_the_event_loop_keeps_running_while_a_command_runs(
    ctx: ToolContext, workdir: Path
) -> None:
    # The command cannot finish until the event loop runs the writer below.
    fifo = workdir / "in.fifo"
    os.mkfifo(fifo)
    task = asyncio.create_task(run(ctx, command=f"cat {fifo}"))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    tick_task = asyncio.create_task(ticker())
    await asyncio.wait_for(asyncio.to_thread(fifo.write_text, "ping"), 10)
    out = await asyncio.wait_for(task, 10)
    tick_task.cancel()
    assert out["stdout"] == "ping"
    assert ticks > 1


async def test_signal_is_reported(ctx: ToolContext) -> None:
    out = await run(ctx, command="kill -TERM $$")
    assert out["signal"] == "SIGTERM"
    assert out["exitCode"] == -1
    assert out["timedOut"] is False


async def test_output_is_capped_while_the_process_keeps_being_drained(ctx: ToolContext) -> None:
    handler = configure({"maxOutputBytes": 1000})["exec"]
    command = "head -c 300000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2"
    out = await acall(handler, ctx, {"command": command})
    assert isinstance(out, dict)
    assert out["stdout"] == "a" * 1000
    assert out["stderr"] == "b" * 1000
    assert out["stdoutTruncated"] is True
    assert out["stderrTruncated"] is True
    assert out["truncated"] is True
    assert out["exitCode"] == 0
    assert out["timedOut"] is False


async def test_default_cap_is_one_mebibyte_per_stream(ctx: ToolContext) -> None:
    out = await run(ctx, command="head -c 1500000 /dev/zero | tr '\\0' x; echo small >&2")
    assert len(out["stdout"]) == 1024 * 1024
    assert out["stdoutTruncated"] is True
    assert out["stderr"] == "small\n"
    assert out["stderrTruncated"] is False


async def test_output_under_the_cap_is_not_truncated(ctx: ToolContext) -> None:
    handler = configure({"maxOutputBytes": 5})["exec"]
    out = await acall(handler, ctx, {"command": "printf abcde"})
    assert isinstance(out, dict)
    assert out["stdout"] == "abcde"
    assert out["truncated"] is False


async def test_invalid_utf8_is_replaced(ctx: ToolContext) -> None:
    out = await run(ctx, command="printf 'ok\\377'")
    assert out["stdout"] == "ok\ufffd"


async def test_stdin_is_empty(ctx: ToolContext) -> None:
    out = await run(ctx, command="cat; echo done", timeoutMs=10_000)
    assert out["stdout"] == "done\n"


async def test_background_job_does_not_hold_the_call_and_ends_with_it(
    ctx: ToolContext, workdir: Path
) -> None:
    sleep, token = unique_sleep()
    os.mkfifo(workdir / "ready.fifo")
    os.mkfifo(workdir / "go.fifo")
    # The shell says its jobs run, then waits for the test to have found them before it exits.
    command = f"{sleep} & nohup {sleep} >/dev/null 2>&1 & echo go > ready.fifo; read line < go.fifo"
    task = asyncio.create_task(run(ctx, command=command, timeoutMs=20_000, env={MARK: token}))
    await read_fifo(workdir / "ready.fifo")
    pids = processes_marked(token)
    # O_RDWR never blocks on a FIFO: the shell's read finds a writer whenever it opens.
    go = os.open(workdir / "go.fifo", os.O_RDWR)
    try:
        os.write(go, b"go\n")
        assert len(pids) >= 3  # the shell and both jobs
        out = await task
        assert out["exitCode"] == 0
        assert out["timedOut"] is False  # the jobs (60 s) did not hold it to its 20 s timeout
        for pid in pids:
            await wait_process_gone(pid)  # the call's processes ended with it
    finally:
        os.close(go)
        for pid in pids:
            kill_if_alive(pid)


async def test_env_is_merged_over_the_process_environment(ctx: ToolContext) -> None:
    out = await run(
        ctx,
        command='echo "$FOO $NUM $FLAG $HALF"; test -n "$PATH" && echo has-path',
        env={"FOO": "bar", "NUM": 3, "FLAG": True, "HALF": 0.5},
    )
    assert out["stdout"] == "bar 3 true 0.5\nhas-path\n"


async def test_the_command_gets_no_secret_of_the_agents_environment(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-tools")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-for-tools")
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("TZ", "UTC")
    out = await run(ctx, command="env")
    names = {line.split("=", 1)[0] for line in out["stdout"].splitlines() if "=" in line}
    assert "sk-" not in out["stdout"]
    assert "hunter2" not in out["stdout"]
    assert {"PATH", "LC_TIME", "TZ"} <= names
    # /bin/sh adds a few of its own (PWD, SHLVL, _); nothing else comes from the agent.
    assert (
        names - {"PATH", "HOME", "LANG", "LC_TIME", "TZ", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"}
        == set()
    )


async def test_config_pass_env_names_variables_and_prefixes(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-1")
    monkeypatch.setenv("AWS_PROFILE", "dev")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "bot")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-tools")
    passing = configure({"passEnv": ["AWS_*", "GIT_AUTHOR_NAME"]})["exec"]
    out = await acall(
        passing,
        ctx,
        {"command": 'echo "$AWS_REGION $AWS_PROFILE $GIT_AUTHOR_NAME [$OPENAI_API_KEY]"'},
    )
    assert isinstance(out, dict)
    assert out["stdout"] == "eu-1 dev bot []\n"


def test_pass_env_must_be_a_list_of_names() -> None:
    with pytest.raises(ToolConfigError):
        configure({"passEnv": "AWS_*"})


@pytest.mark.parametrize("env", [{"X": {"nested": 1}}, {"X": [1]}, {"X": None}, {"A=B": "1"}])
async def test_env_rejects_non_primitive_values(ctx: ToolContext, env: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as exc_info:
        await run(ctx, command="true", env=env)
    assert exc_info.value.code == "E_TOOL_INVALID_ARGS"


async def test_exec_requires_a_command(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as exc_info:
        await acall(exec_, ctx, {"command": ""})
    assert exc_info.value.code == "E_TOOL_INVALID_ARGS"


async def test_script_runs_with_args_in_the_workdir(
    ctx: ToolContext, workdir: Path, real_workdir: str
) -> None:
    (workdir / "scripts").mkdir()
    (workdir / "scripts" / "greet.sh").write_text('echo "hello $1 $2 from $(pwd -P)"\n')
    out = await acall(script, ctx, {"path": "scripts/greet.sh", "args": ["big", "world"]})
    assert isinstance(out, dict)
    assert out["stdout"] == f"hello big world from {real_workdir}\n"
    assert out["shell"] == "/bin/bash"
    assert out["args"] == ["big", "world"]
    assert out["path"] == f"{real_workdir}/scripts/greet.sh"
    assert out["exitCode"] == 0


async def test_script_with_another_shell_and_timeout(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "slow.sh").write_text("sleep 60\n")
    out = await acall(script, ctx, {"path": "slow.sh", "shell": "/bin/sh", "timeoutMs": 200})
    assert isinstance(out, dict)
    assert out["shell"] == "/bin/sh"
    assert out["timedOut"] is True


async def test_script_missing(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as exc_info:
        await acall(script, ctx, {"path": "nope.sh"})
    assert exc_info.value.code == "E_BASH_SCRIPT_NOT_FOUND"


async def test_script_outside_the_workdir_is_refused(ctx: ToolContext, outside: Path) -> None:
    (outside / "evil.sh").write_text("echo pwned\n")
    for path in ("../outside/evil.sh", str(outside / "evil.sh")):
        with pytest.raises(ToolError) as exc_info:
            await acall(script, ctx, {"path": path})
        assert exc_info.value.code == "E_BASH_PATH_OUTSIDE_WORKDIR"


async def test_script_with_a_missing_shell(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a.sh").write_text("true\n")
    with pytest.raises(ToolError) as exc_info:
        await acall(script, ctx, {"path": "a.sh", "shell": "/nonexistent/shell"})
    assert exc_info.value.code == "E_BASH_SPAWN_FAILED"


@pytest.mark.parametrize(
    "config",
    [{"maxOutputBytes": 0}, {"maxOutputBytes": "1"}, {"allowOutsideWorkdir": "yes"}, {"typo": 1}],
)
def test_bad_config_is_rejected(config: dict[str, Any]) -> None:
    with pytest.raises(ToolConfigError):
        configure(config)
