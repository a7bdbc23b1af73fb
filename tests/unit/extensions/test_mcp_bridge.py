"""The MCP bridge against a real MCP server process written with the ``mcp`` SDK, run in the
tool sandbox as configured by default (the fixture server is this venv's python and a script,
which the bridge makes visible by itself)."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.support.extensions import ExtensionHarness, base_extension
from tests.support.tool_context import MARK, processes_marked
from tools_base import ExtensionError, sandbox
from tools_base.extensions.mcp_bridge import parse_servers, tool_name_for
from tools_base.sandbox import Probe, SandboxMode, SandboxPolicy

pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp_server.py"
FIXTURE_TOOLS = (
    "add", "echo", "fail", "crash", "pid", "slow", "read", "write", "getenv", "cwd", "fetch",
)  # fmt: skip

RULES: list[dict[str, Any]] = [
    {"when": {"input": "^add$"}, "call": {"tool": "mcp__add", "args": {"a": 2, "b": 40}}},
    {"when": {"input": "^fail$"}, "call": {"tool": "mcp__fail", "args": {"message": "no way"}}},
    {"when": {"input": "^crash$"}, "call": {"tool": "mcp__crash"}},
    {"when": {"input": "^pid$"}, "call": {"tool": "mcp__pid"}},
    {"when": {"input": "^slow$"}, "call": {"tool": "mcp__slow", "args": {"seconds": 5}}},
    {"when": {"input": "^echo$"}, "call": {"tool": "mcp__echo", "args": {"text": "hi"}}},
    {
        "when": {"input": "^read (?P<path>.+)$"},
        "call": {"tool": "mcp__read", "args": {"path": "{path}"}},
    },
    {
        "when": {"input": "^write (?P<path>\\S+) (?P<text>.+)$"},
        "call": {"tool": "mcp__write", "args": {"path": "{path}", "text": "{text}"}},
    },
    {
        "when": {"input": "^getenv (?P<name>.+)$"},
        "call": {"tool": "mcp__getenv", "args": {"name": "{name}"}},
    },
    {"when": {"input": "^cwd$"}, "call": {"tool": "mcp__cwd"}},
    {"when": {"status": "ok"}, "reply": "{result.result}"},
    {"when": {"status": "error"}, "reply": "{errorCode}: {error}"},
]


def stdio(token: str | None = None, **extra: Any) -> dict[str, Any]:
    """The fixture server; ``token`` marks its processes (see ``processes_marked``)."""
    env = {MARK: token} if token else {}
    spec = {"name": "local", "command": sys.executable, "args": [str(SERVER)], **extra}
    spec["env"] = {**env, **extra.get("env", {})}
    return spec


@pytest.fixture
def token() -> str:
    return secrets.token_hex(8)


@pytest.fixture
async def harness(tmp_path: Path, token: str) -> AsyncIterator[ExtensionHarness]:
    h = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[base_extension("mcp", servers=[stdio(token, callTimeoutSeconds=1)])],
    )
    yield h
    await h.close()


@pytest.fixture(params=[SandboxMode.BWRAP, SandboxMode.NAMESPACES], ids=str)
def backend(request: pytest.FixtureRequest) -> Iterator[SandboxMode]:
    """Each sandbox backend in turn, as the agent's ``policy.sandbox`` would choose it."""
    mode: SandboxMode = request.param
    found = sandbox.probe(mode)
    if not found.available:
        pytest.skip(f"no {mode} sandbox on this machine: {found.reason}")
    before = sandbox.current_mode()
    sandbox.configure(mode)
    yield mode
    sandbox.configure(before)


async def gone(pids: Iterable[int]) -> bool:
    """Whether every one of ``pids`` ended within 30 s (bounded polling of the process table:
    a loaded machine may take seconds to notice a quota and stop a server)."""
    left = set(pids)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in list(left):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                left.discard(pid)
        if not left:
            return True
        await asyncio.sleep(0.025)
    return False


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_mcp_names_are_made_safe() -> None:
    assert tool_name_for("mcp", "read_file") == "mcp__read_file"
    assert tool_name_for("mcp", "web.search") == "mcp__web_search"
    assert tool_name_for("mcp", "a__b") == "mcp__a_b"
    assert tool_name_for("mcp", "...") is None


async def test_server_tools_are_registered_with_their_schema_and_source(
    harness: ExtensionHarness,
) -> None:
    tools = {t.name: t.item for t in harness.registry}
    assert set(tools) == {f"mcp__{n}" for n in FIXTURE_TOOLS}
    add = tools["mcp__add"]
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.source is not None
    assert add.source.to_json() == {
        "type": "mcp",
        "name": "mcp",
        "mcp": {"extensionName": "mcp", "serverName": "local"},
    }


async def test_calls_answer_and_failures_are_structured(harness: ExtensionHarness) -> None:
    assert (await harness.turn("add")).text == "42"
    failed = (await harness.turn("fail")).text
    assert failed.startswith("E_MCP_TOOL_ERROR: ")
    assert failed.endswith("no way")
    assert (await harness.turn("slow")).text.startswith("E_MCP_TIMEOUT: ")
    assert (await harness.turn("echo")).text == "hi"  # still connected after the timeout


async def test_a_crashed_server_is_an_error_and_the_next_call_restarts_it(
    harness: ExtensionHarness, token: str
) -> None:
    # The pid the server reports is its PID namespace's: its processes are found by their mark.
    first = processes_marked(token)
    assert first
    crashed = await harness.turn("crash")
    assert crashed.status == "ok"  # the Turn (and the agent) carry on
    assert crashed.text.startswith("E_MCP_SERVER_UNAVAILABLE: ")
    assert await gone(first)
    assert (await harness.turn("pid")).text.isdigit()
    second = processes_marked(token)
    assert second
    assert not set(second) & set(first)
    await harness.close()
    assert await gone(second)  # stopped with the agent


async def test_invalid_arguments_never_reach_the_server(harness: ExtensionHarness) -> None:
    harness.runner.settings.model.script.rules.insert(  # type: ignore[attr-defined]
        0,
        type(harness.runner.settings.model.script.rules[0]).model_validate(  # type: ignore[attr-defined]
            {"when": {"input": "^bad$"}, "call": {"tool": "mcp__add", "args": {"a": "two"}}}
        ),
    )
    assert (await harness.turn("bad")).text.startswith("E_TOOL_INVALID_ARGS: ")


async def test_an_allowlist_registers_only_those_tools(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[base_extension("mcp", servers=[stdio(tools=["add", "echo"])])],
    )
    assert sorted(t.name for t in harness.registry) == ["mcp__add", "mcp__echo"]
    await harness.close()


async def test_a_server_that_cannot_start_does_not_stop_the_agent(tmp_path: Path) -> None:
    broken = {"name": "ghost", "command": str(tmp_path / "no-such-server")}
    with capture_logs() as logs:
        harness = await ExtensionHarness.start(
            tmp_path,
            rules=RULES,
            extensions=[base_extension("mcp", servers=[broken, stdio()])],
        )
    assert "mcp__add" in harness.registry  # the good server still serves
    [failed] = [e for e in logs if e["event"] == "mcp server did not start; retrying later"]
    assert failed["server"] == "ghost"
    assert (await harness.turn("add")).text == "42"
    await harness.close()


async def test_a_streamable_http_server(tmp_path: Path) -> None:
    # the server inherits a socket bound and listening here: no other process can take its port
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER),
        "http",
        str(listener.fileno()),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        pass_fds=(listener.fileno(),),
    )
    listener.close()  # connections queue on the child's copy until it serves them
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        harness = await ExtensionHarness.start(
            tmp_path,
            rules=RULES,
            extensions=[base_extension("mcp", servers=[{"name": "remote", "url": url}])],
        )
        assert (await harness.turn("add")).text == "42"
        await harness.close()
    finally:
        process.terminate()
        async with asyncio.timeout(10):
            await process.wait()


async def test_a_sandboxed_server_sees_its_program_and_its_own_directory_only(
    tmp_path: Path, backend: SandboxMode, token: str
) -> None:
    beside = tmp_path / "beside-the-workspace"
    beside.mkdir()
    (beside / "secret.txt").write_text("operator-only")
    value = secrets.token_hex(8)
    harness = await ExtensionHarness.start(
        tmp_path / "agent",
        rules=RULES,
        extensions=[base_extension("mcp", servers=[stdio(token, env={"FIXTURE_TOKEN": value})])],
    )
    try:
        home = (await harness.turn("getenv HOME")).text
        assert Path(home).name.startswith("goondan-mcp-")  # its own, not the agent's
        assert (await harness.turn("cwd")).text == home
        assert (await harness.turn(f"write {home}/note.txt kept")).text == "kept"
        assert (Path(home) / "note.txt").read_text() == "kept"

        for outside in (beside / "secret.txt", f"/proc/{os.getpid()}/environ"):
            refused = (await harness.turn(f"read {outside}")).text
            assert refused.startswith("E_MCP_TOOL_ERROR: "), refused
            assert refused.endswith(f"cannot read {outside}: No such file or directory")
        planted = (await harness.turn(f"write {beside}/planted.txt x")).text
        assert planted.startswith("E_MCP_TOOL_ERROR: "), planted
        assert f"cannot write {beside}/planted.txt" in planted
        assert not (beside / "planted.txt").exists()

        # Its environment reaches it, and no command line on the machine shows it.
        assert (await harness.turn("getenv FIXTURE_TOKEN")).text == value
        marked = processes_marked(token)
        assert marked
        assert not [pid for pid in marked if value.encode() in command_line(pid)]
    finally:
        await harness.close()
    assert not os.path.isdir(home)  # noqa: ASYNC240 - removed with the server


async def test_a_server_with_sandbox_false_runs_unconfined(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("operator-only")
    harness = await ExtensionHarness.start(
        tmp_path, rules=RULES, extensions=[base_extension("mcp", servers=[stdio(sandbox=False)])]
    )
    try:
        assert (await harness.turn(f"read {secret}")).text == "operator-only"
        # The host's /proc, not a private one: this very process is there. (Its `status`, not
        # its `environ`: naming a process in the same interpreter rewrites that memory.)
        status = (await harness.turn(f"read /proc/{os.getpid()}/status")).text
        assert f"Pid:\t{os.getpid()}\n" in status
        assert (await harness.turn("getenv HOME")).text == os.environ.get("HOME", "")
    finally:
        await harness.close()


async def test_where_no_sandbox_can_be_made_the_server_does_not_start(
    harness: ExtensionHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sandbox(mode: SandboxMode | str = SandboxMode.AUTO) -> Probe:
        return Probe(SandboxMode(mode), None, "user namespaces are off", "none")

    assert (await harness.turn("crash")).text.startswith("E_MCP_SERVER_UNAVAILABLE: ")
    monkeypatch.setattr(sandbox, "probe", no_sandbox)
    refused = (await harness.turn("add")).text
    assert refused.startswith("E_MCP_SERVER_UNAVAILABLE: "), refused
    assert "none can be made here: user namespaces are off" in refused

    with capture_logs() as logs:
        other = await ExtensionHarness.start(
            tmp_path / "other", rules=RULES, extensions=[base_extension("mcp", servers=[stdio()])]
        )
    await other.close()
    [failed] = [e for e in logs if e["event"] == "mcp server did not start; retrying later"]
    assert "none can be made here: user namespaces are off" in failed["error"]

    monkeypatch.undo()
    assert (await harness.turn("add")).text == "42"  # the next call starts it after all


def test_the_sandbox_config_of_a_server_is_checked() -> None:
    def parse(**extra: Any) -> list[Any]:
        return parse_servers({"servers": [{"name": "s", "command": "srv", **extra}]})

    [default] = parse()
    assert default.sandbox == SandboxPolicy.from_config("s", None, network=True, cpu=False)
    assert default.sandbox.network
    assert default.sandbox.limits.cpu_seconds is None
    [unconfined] = parse(sandbox=False)
    assert unconfined.sandbox is None
    [tuned] = parse(sandbox={"network": False, "memoryMiB": 512, "readOnlyPaths": ["/srv/d/"]})
    assert tuned.sandbox is not None
    assert not tuned.sandbox.network
    assert tuned.sandbox.limits.memory_mib == 512
    assert tuned.sandbox.limits.cpu_seconds is None
    assert tuned.sandbox.read_only == ("/srv/d",)
    [narrowed] = parse(sandbox={"network": {"allow": ["*.Example.com"], "deny": ["x.example.com"]}})
    assert narrowed.sandbox is not None
    assert narrowed.sandbox.network
    assert narrowed.sandbox.network_rules.allow == ("*.example.com",)
    assert narrowed.sandbox.network_rules.refused_host("x.example.com")
    assert narrowed.sandbox.network_rules.refused_host("api.example.com") is None

    at = "config.servers[0].sandbox"
    for bad, said in [
        (True, f"{at} must be false or an object, got True"),
        ({"network": "yes"}, f"{at}.network must be off, on (or false/true) or an object"),
        ({"network": {"allow": ["a b"]}}, f"{at}.network.allow has 'a b', which is not a host"),
        ({"memoryMiB": 0}, f"{at}.memoryMiB must be an integer >= 1 or null, got 0"),
        ({"readWritePaths": ["data"]}, f"{at}.readWritePaths must be a list of absolute paths"),
        ({"netwrk": True}, f"{at} has unknown key(s) 'netwrk'"),
    ]:
        with pytest.raises(ExtensionError, match=f"^{re.escape(said)}"):
            parse(sandbox=bad)
    http = {"name": "h", "url": "http://127.0.0.1:1/mcp", "sandbox": {}}
    with pytest.raises(ExtensionError, match=re.escape(f"{at} applies to stdio servers")):
        parse_servers({"servers": [http]})


async def test_a_server_past_its_disk_quota_is_stopped(
    tmp_path: Path, backend: SandboxMode, token: str
) -> None:
    server = stdio(token, sandbox={"diskMiB": 1})
    harness = await ExtensionHarness.start(
        tmp_path / "agent", rules=RULES, extensions=[base_extension("mcp", servers=[server])]
    )
    try:
        home = (await harness.turn("getenv HOME")).text
        first = processes_marked(token)
        assert first
        big = "x" * (3 * 1024 * 1024)
        await harness.turn(f"write {home}/big.txt {big}")  # its answer may be cut short
        assert os.path.getsize(Path(home) / "big.txt") == len(big)  # noqa: ASYNC240
        assert await gone(first)  # stopped by its quota, not by a call
        # Started again by the next call; it may delete what it holds, then write again.
        assert (await harness.turn("getenv HOME")).text == home
        assert processes_marked(token)
    finally:
        await harness.close()
