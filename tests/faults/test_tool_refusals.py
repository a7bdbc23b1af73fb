"""The base tools under attack, through the real registry and executor.

Every attack must come back as a structured error result (never an exception into the agent),
and nothing outside the instance workspace may be read, written or deleted: path traversal
and symlink escapes in file-system, SSRF targets in http-fetch (literal addresses in every
notation, DNS names that resolve to private addresses, redirects to them), and bash commands
past their timeout and output cap.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_process.boot import build_registry
from agent_process.scope import StepScope, TurnScope
from agent_process.tools.executor import ToolExecutor
from bundle import load_bundle
from tests.support.tool_context import (
    MARK,
    kill_if_alive,
    processes_marked,
    read_fifo,
    wait_process_gone,
)
from tools_base import Message, ToolCall, ToolCallResult

pytestmark = pytest.mark.timeout(60)

SECRET = "TOP-SECRET-0xC0FFEE"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: rules, script: {{rules: [{{reply: hi}}]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: target}}
spec:
  modelConfig: {{modelRef: Model/m}}
  tools:
    - {{ref: {{kind: Tool, name: file-system, package: "@goondan/base"}}}}
    - {{ref: {{kind: Tool, name: bash, package: "@goondan/base"}}, config: {{maxOutputBytes: 65536}}}}
    - ref: {{kind: Tool, name: http-fetch, package: "@goondan/base"}}
      config: {{allowedHosts: ["127.0.0.1:{port}"]}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec: {{entryAgent: Agent/target, agents: [Agent/target]}}
"""


@dataclass
class Target:
    executor: ToolExecutor
    workdir: Path
    outside: Path

    async def call(self, name: str, **args: Any) -> ToolCallResult:
        turn = TurnScope(
            agent_name="target",
            instance_key="default",
            turn_id="turn-attack",
            trace_id="f" * 32,
            workdir=self.workdir,
            logger=structlog.get_logger(),
        )
        scope = StepScope(turn=turn, index=0, allowlist=frozenset(self.executor.registry.names()))
        call = ToolCall(id="call-attack", name=name, args=args)
        return await self.executor.execute(call, scope, Message(id="a", role="assistant"))


class Redirector(BaseHTTPRequestHandler):
    """Answers every GET with a redirect to ``server.location``; counts what it served."""

    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        location = self.server.location  # type: ignore[attr-defined]
        if location is None:
            body = SECRET.encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(302)
        self.send_header("location", location)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def http_server(location: str | None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    server.hits = []  # type: ignore[attr-defined]
    server.location = location  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    return server


@pytest.fixture
def secret_server() -> Iterator[ThreadingHTTPServer]:
    server = http_server(None)  # serves the secret; nobody may reach it
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def redirector(secret_server: ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    port = secret_server.server_address[1]
    server = http_server(f"http://127.0.0.1:{port}/secret")
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
async def target(tmp_path: Path, redirector: ThreadingHTTPServer) -> AsyncIterator[Target]:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUNDLE.format(port=redirector.server_address[1]))
    plan = load_bundle(path).agent_plan("target", tmp_path / "state")
    executor = ToolExecutor(build_registry(plan.tools))
    workdir = tmp_path / "workspace"
    outside = tmp_path / "outside"
    workdir.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (tmp_path / "secret.txt").write_text(SECRET)
    (workdir / "inside.txt").write_text("inside")
    (workdir / "link_file").symlink_to(outside / "secret.txt")
    (workdir / "link_dir").symlink_to(outside)
    (workdir / "link_root").symlink_to("/")
    (workdir / "chain_b").symlink_to(workdir / "link_file")
    (workdir / "chain_a").symlink_to(workdir / "chain_b")
    (workdir / "sub").mkdir()
    (workdir / "sub" / "up").symlink_to("../..")
    yield Target(executor, workdir, outside)
    await executor.aclose()


def assert_refused(result: ToolCallResult, *codes: str) -> None:
    assert result.status == "error", result.to_json()
    assert result.error is not None
    assert result.error.code in codes, result.to_json()
    assert SECRET not in json.dumps(result.to_json())


def outside_files(root: Path, workdir: Path, planted: Path) -> list[str]:
    """Everything under ``root`` but outside ``workdir``, and the planted /tmp file if any."""
    found = sorted(str(p) for p in root.rglob("*") if not str(p).startswith(str(workdir)))
    return [*found, *(["planted"] if planted.exists() else [])]


FS_REFUSED = ("E_FS_PATH_OUTSIDE_WORKDIR", "E_FS_REFUSED")

FILE_ATTACKS: list[tuple[str, dict[str, Any]]] = [
    ("read", {"path": "../secret.txt"}),
    ("read", {"path": "a/../../secret.txt"}),
    ("read", {"path": "../outside/secret.txt"}),
    ("read", {"path": "../../../../../../../../etc/passwd"}),
    ("read", {"path": "/etc/passwd"}),
    ("read", {"path": "SECRET_ABSOLUTE"}),
    ("read", {"path": "link_file"}),
    ("read", {"path": "link_dir/secret.txt"}),
    ("read", {"path": "link_root/etc/passwd"}),
    ("read", {"path": "chain_a"}),
    ("read", {"path": "sub/up/secret.txt"}),
    ("write", {"path": "../escape.txt", "content": "x"}),
    ("write", {"path": "link_dir/planted.txt", "content": "x"}),
    ("write", {"path": "link_file", "content": "overwritten"}),
    ("write", {"path": "PLANTED_IN_TMP", "content": "x"}),
    ("list", {"path": ".."}),
    ("list", {"path": "link_dir"}),
    ("list", {"path": "/"}),
    ("mkdir", {"path": "../made"}),
    ("mkdir", {"path": "link_dir/made"}),
    ("delete", {"path": "../secret.txt"}),
    ("delete", {"path": "link_dir/secret.txt"}),
    ("delete", {"path": "link_dir", "recursive": True}),
    ("stat", {"path": "../secret.txt"}),
]


@pytest.mark.parametrize(("export", "args"), FILE_ATTACKS, ids=lambda v: str(v))
async def test_file_system_stays_inside_the_workspace(
    target: Target, tmp_path: Path, export: str, args: dict[str, Any]
) -> None:
    if args.get("path") == "SECRET_ABSOLUTE":
        args = {**args, "path": str(target.outside / "secret.txt")}
    # an absolute path in /tmp itself, outside tmp_path; its own name, so no other run sees it
    planted = Path("/tmp") / f"goondan-planted-{uuid.uuid4().hex}.txt"
    if args.get("path") == "PLANTED_IN_TMP":
        args = {**args, "path": str(planted)}
    before = outside_files(tmp_path, target.workdir, planted)
    result = await target.call(f"file-system__{export}", **args)
    if export == "delete" and args["path"] == "link_dir" and result.status == "ok":
        # deleting the link itself is allowed: it is in the workspace; its target is not touched
        assert not (target.workdir / "link_dir").is_symlink()
    else:
        assert_refused(result, *FS_REFUSED)
    try:
        assert outside_files(tmp_path, target.workdir, planted) == before  # nothing came or went
    finally:
        planted.unlink(missing_ok=True)
    assert (target.outside / "secret.txt").read_text() == SECRET


async def test_a_nul_byte_in_a_path_is_an_error_result(target: Target) -> None:
    result = await target.call("file-system__read", path="inside.txt\x00../../secret.txt")
    assert result.status == "error"
    assert SECRET not in json.dumps(result.to_json())


async def test_the_workspace_itself_still_works(target: Target) -> None:
    read = await target.call("file-system__read", path="inside.txt")
    assert read.status == "ok"
    assert "inside" in json.dumps(read.to_json())
    assert (await target.call("file-system__write", path="new/ok.txt", content="ok")).status == "ok"


HTTP_ATTACKS = [
    "http://127.0.0.1/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://0.0.0.0/",
    "http://localhost/",
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/",
    "http://example.com@127.0.0.1/",
    "http://100.64.0.1/",
]


@pytest.mark.parametrize("url", HTTP_ATTACKS)
async def test_http_fetch_refuses_internal_addresses(
    target: Target, secret_server: ThreadingHTTPServer, url: str
) -> None:
    result = await target.call("http-fetch__get", url=url)
    assert_refused(result, "E_HTTP_FORBIDDEN_ADDRESS", "E_HTTP_INVALID_URL", "E_HTTP_DNS_FAILED")
    assert secret_server.hits == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://10.0.0.1/"])
async def test_http_fetch_refuses_other_schemes(target: Target, url: str) -> None:
    assert_refused(
        await target.call("http-fetch__get", url=url),
        "E_HTTP_UNSUPPORTED_PROTOCOL",
        "E_HTTP_INVALID_URL",
    )


@pytest.mark.parametrize("resolved", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1"])
async def test_http_fetch_refuses_names_that_resolve_inside(
    target: Target, monkeypatch: pytest.MonkeyPatch, resolved: str
) -> None:
    real = socket.getaddrinfo

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "innocent.example":
            family = socket.AF_INET6 if ":" in resolved else socket.AF_INET
            address = (resolved, port or 80, 0, 0) if ":" in resolved else (resolved, port or 80)
            return [(family, socket.SOCK_STREAM, 6, "", address)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    result = await target.call("http-fetch__get", url="http://innocent.example/")
    assert_refused(result, "E_HTTP_FORBIDDEN_ADDRESS")
    assert "innocent.example" in (result.error.message if result.error else "")


async def test_a_redirect_to_an_internal_address_is_refused(
    target: Target, redirector: ThreadingHTTPServer, secret_server: ThreadingHTTPServer
) -> None:
    url = f"http://127.0.0.1:{redirector.server_address[1]}/start"
    result = await target.call("http-fetch__get", url=url)
    assert_refused(result, "E_HTTP_FORBIDDEN_ADDRESS")
    assert redirector.hits == ["/start"]  # type: ignore[attr-defined]
    assert secret_server.hits == []  # type: ignore[attr-defined]


async def test_bash_past_its_timeout_is_killed_with_everything_it_started(
    target: Target,
) -> None:
    token = secrets.token_hex(8)
    os.mkfifo(target.workdir / "ready.fifo")
    call = asyncio.create_task(
        target.call(
            "bash__exec",
            command="sleep 300 & echo go > ready.fifo; sleep 30",
            timeoutMs=2000,
            env={MARK: token},
        )
    )
    await read_fifo(target.workdir / "ready.fifo")
    started = processes_marked(token)  # the shell and its background job, as seen from here
    try:
        assert len(started) >= 2
        result = await call
        assert result.status == "ok"
        output = result.output
        assert isinstance(output, dict)
        assert output["timedOut"] is True
        for pid in started:
            await wait_process_gone(pid)
    finally:
        for pid in started:
            kill_if_alive(pid)


async def test_bash_output_beyond_the_cap_is_cut_and_flagged(target: Target) -> None:
    result = await target.call(
        "bash__exec", command="head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2"
    )
    output = result.output
    assert isinstance(output, dict)
    assert output["stdoutTruncated"] is True
    assert output["truncated"] is True
    assert len(str(output["stdout"])) <= 65536
    assert output["exitCode"] == 0
    assert "done" in str(output["stderr"])


async def test_an_endless_command_is_stopped_by_the_timeout(target: Target) -> None:
    # `yes` fills the output cap in milliseconds even on a busy machine; a shell loop may not.
    result = await target.call("bash__exec", command="yes x", timeoutMs=500)
    output = result.output
    assert isinstance(output, dict)
    assert output["timedOut"] is True
    assert output["stdoutTruncated"] is True
