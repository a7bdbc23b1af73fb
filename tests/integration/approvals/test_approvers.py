"""Approvals are decided by operators: a real daemon, real agent processes, real shells.

``clerk``'s ``bash__exec`` waits for an operator. The ``rogue`` agent has a shell that needs
nobody's approval: a tool of the swarm's own that starts ``/bin/sh`` as the agent's child, so
no tool sandbox stands between its programs and the daemon's API. The rogue's shell reaches
the API (``api.sock``, or the loopback listener) with ``curl`` and approves the clerk's parked
call: the decision is refused, the call stays parked, and the attempt is on record. Decisions
that are taken record who took them.

Every wait is on an event (the daemon's live runtime events) or an answer, under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ipc.scope import SCOPE_ENV
from orchestrator.daemon import Orchestrator
from tests.support.approvals import approval_swarm, runtime_events, watching

pytestmark = pytest.mark.timeout(120)

ME = {
    "pid": os.getpid(),  # the daemon runs in this process, and so does the test's client
    "uid": os.getuid(),
    "user": pwd.getpwuid(os.getuid()).pw_name,
}


def unix_client(orchestrator: Orchestrator) -> httpx2.AsyncClient:
    transport = httpx2.AsyncHTTPTransport(uds=str(orchestrator.state_dir / "api.sock"))
    return httpx2.AsyncClient(transport=transport, base_url="http://goondan", timeout=30)


def tcp_client(orchestrator: Orchestrator, token: str | None = None) -> httpx2.AsyncClient:
    assert orchestrator.api is not None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = f"http://127.0.0.1:{orchestrator.api.port}"
    return httpx2.AsyncClient(base_url=base, headers=headers, timeout=30)


async def parked_run(orchestrator: Orchestrator) -> tuple[asyncio.Task[Any], str]:
    """clerk's request whose ``bash__exec`` (``touch ran.txt``) parks: the request, the id."""
    async with watching(orchestrator) as events:
        request = asyncio.ensure_future(orchestrator.request("run touch ran.txt", agent="clerk"))
        requested = await events.next("approval.requested", agentName="clerk")
    return request, str(requested["approvalId"])


def approve_with_curl(approval_id: str, *, socket: Path | None = None, port: int = 0) -> str:
    """The shell command that approves ``approval_id`` through the API (on ``socket``, else
    on the loopback ``port``)."""
    options, base = f"--unix-socket {shlex.quote(str(socket))}", "http://goondan"
    if socket is None:
        options, base = "", f"http://127.0.0.1:{port}"
    return (
        f"curl -s --max-time 20 {options} -H 'Content-Type: application/json' -d '{{}}' "
        f"{base}/v1/approvals/{approval_id}/approve"
    )


def refusal_in(output: str) -> dict[str, Any]:
    """The API's answer the rogue's shell printed (``ran: <stdout>``)."""
    assert output.startswith("ran: "), output
    answer: dict[str, Any] = json.loads(output.removeprefix("ran: "))
    return answer


async def still_parked_then_rejected(
    orchestrator: Orchestrator, request: asyncio.Task[Any], approval_id: str
) -> dict[str, Any]:
    """The clerk's call is still pending; the operator rejects it and the call never runs.
    The rejected record."""
    async with unix_client(orchestrator) as http:
        record = (await http.get(f"/v1/approvals/{approval_id}")).json()["approval"]
        assert record["status"] == "pending"
        assert "decidedBy" not in record
        assert not request.done()
        rejected = await http.post(
            f"/v1/approvals/{approval_id}/reject", json={"reason": "not by an agent"}
        )
        assert rejected.status_code == 200, rejected.text
    async with asyncio.timeout(30):
        answer = await request
    assert answer.output.startswith("ERROR E_TOOL_REJECTED: ")
    clerk = orchestrator.state_dir / "agents" / "clerk" / "instances" / "default"
    assert not (clerk / "workspace" / "ran.txt").exists()
    decided: dict[str, Any] = rejected.json()["approval"]
    return decided


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("", "carries the process scope of agent 'rogue'"),
        # Its scope dropped (the shell replaced): still a program the rogue agent started.
        (f"exec env -u {SCOPE_ENV} ", "was started by agent 'rogue'"),
    ],
    ids=["shell", "scope-dropped"],
)
async def test_an_agents_shell_cannot_approve_another_agents_parked_call(
    tmp_path: Path, prefix: str, why: str
) -> None:
    async with approval_swarm(tmp_path, rogue=True) as swarm:
        request, approval_id = await parked_run(swarm)
        command = prefix + approve_with_curl(approval_id, socket=swarm.state_dir / "api.sock")
        async with watching(swarm) as events:
            answer = await swarm.request(f"shell {command}", agent="rogue")
            refused = await events.next("approval.refused", approvalId=approval_id)

        error = refusal_in(answer.output)["error"]
        assert error["code"] == "APPROVAL_FORBIDDEN"
        assert error["message"].startswith("approvals are decided by an operator")
        assert why in error["message"]
        assert why in refused["reason"]
        assert (refused["agentName"], refused["toolName"]) == ("clerk", "bash__exec")
        curl = refused["decidedBy"]
        assert (curl["via"], curl["uid"]) == ("unix", os.getuid())
        assert curl["pid"] not in (os.getpid(), swarm.supervisor.handle("rogue").pid)

        decided = await still_parked_then_rejected(swarm, request, approval_id)
        assert decided["decidedBy"] == {"via": "unix", "gid": os.getgid(), **ME}
    logged = [e for e in runtime_events(tmp_path / "state") if e["type"] == "approval.refused"]
    assert [e["approvalId"] for e in logged] == [approval_id]


async def test_a_detached_program_of_an_agent_cannot_approve(tmp_path: Path) -> None:
    async with approval_swarm(tmp_path, rogue=True) as swarm:
        request, approval_id = await parked_run(swarm)
        curl = approve_with_curl(approval_id, socket=swarm.state_dir / "api.sock")
        async with watching(swarm) as events:
            # Its own session, its parent gone: only the scope it carries tells whose it is.
            answer = await swarm.request(f"shell setsid -f {curl} > /dev/null 2>&1", agent="rogue")
            assert answer.output == "ran: "
            refused = await events.next("approval.refused", approvalId=approval_id)
        assert "carries the process scope of agent 'rogue'" in refused["reason"]
        await still_parked_then_rejected(swarm, request, approval_id)


async def test_an_agents_shell_cannot_approve_on_the_loopback_listener(tmp_path: Path) -> None:
    async with approval_swarm(tmp_path, rogue=True, api_listen="127.0.0.1:0") as swarm:
        assert swarm.api is not None
        assert swarm.api.port
        request, approval_id = await parked_run(swarm)
        curl = approve_with_curl(approval_id, port=swarm.api.port)
        async with watching(swarm) as events:
            answer = await swarm.request(f"shell exec env -u {SCOPE_ENV} {curl}", agent="rogue")
            refused = await events.next("approval.refused", approvalId=approval_id)
        error = refusal_in(answer.output)["error"]
        assert error["code"] == "APPROVAL_FORBIDDEN"
        assert "was started by agent 'rogue'" in error["message"]
        caller = refused["decidedBy"]
        assert (caller["via"], caller["anonymous"], caller["uid"]) == ("tcp", True, os.getuid())
        assert caller["address"].startswith("127.0.0.1:")

        # The operator on the same listener: taken, and the process found behind the socket.
        async with tcp_client(swarm) as http:
            approved = await http.post(f"/v1/approvals/{approval_id}/approve", json={})
        assert approved.status_code == 200, approved.text
        decided_by = approved.json()["approval"]["decidedBy"]
        assert {k: decided_by[k] for k in ("via", "anonymous", *ME)} == {
            "via": "tcp",
            "anonymous": True,
            **ME,
        }
        async with asyncio.timeout(30):
            assert (await request).status == "ok"


async def test_a_process_carrying_an_agents_scope_is_refused(tmp_path: Path) -> None:
    async with approval_swarm(tmp_path, rogue=True) as swarm:
        request, approval_id = await parked_run(swarm)
        await swarm.supervisor.ensure_running("rogue")
        scope = swarm.supervisor.handle("rogue").scope
        assert scope
        client = (
            "import http.client, socket, sys\n"
            "class C(http.client.HTTPConnection):\n"
            "    def connect(self):\n"
            "        self.sock = socket.socket(socket.AF_UNIX)\n"
            "        self.sock.connect(sys.argv[1])\n"
            "c = C('goondan', timeout=20)\n"
            "c.request('POST', sys.argv[2], body='{}', "
            "headers={'Content-Type': 'application/json'})\n"
            "print(c.getresponse().read().decode())\n"
        )
        path = f"/v1/approvals/{approval_id}/approve"
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", client, str(swarm.state_dir / "api.sock"), path],
            env={**os.environ, SCOPE_ENV: scope},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "APPROVAL_FORBIDDEN"
        assert "the caller carries the process scope of agent 'rogue'" in error["message"]
        await still_parked_then_rejected(swarm, request, approval_id)
