"""The A2A front door, driven with the official a2a-sdk client against a daemon serving loopback
TCP with a token: cards, tasks, conversations, streams, cancelling, approvals, restarts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from orchestrator.daemon import Orchestrator
from tests.support import readme
from tests.support.a2a_swarm import (
    TOKEN,
    a2a_client,
    a2a_swarm,
    base_url,
    http_client,
    user_says,
    write_a2a_swarm,
)
from tests.support.daemon import Daemon, run_cli

pytestmark = pytest.mark.timeout(120)

DOC_PAGE = Path(__file__).resolve().parents[3] / "docs" / "front-doors" / "a2a.md"
RPC_HEADERS = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with a2a_swarm(tmp_path) as orchestrator:
        yield orchestrator


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with http_client() as client:
        yield client


async def only_task(client: Client, request: SendMessageRequest) -> Task:
    """The one answer of a non-streaming send: its task."""
    responses = [response async for response in client.send_message(request)]
    assert len(responses) == 1
    assert responses[0].HasField("task"), responses
    return responses[0].task


def answer_of(task: Task) -> str:
    [artifact] = task.artifacts
    return "".join(part.text for part in artifact.parts)


async def test_the_cards_name_each_agent_its_endpoint_and_its_skills(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    _, url = await a2a_client(http, f"{base}/a2a/scribe")
    assert url == f"{base}/a2a/scribe"  # absolute, as the caller reached the daemon
    from a2a.client import A2ACardResolver

    card = await A2ACardResolver(http, base).get_agent_card()  # the entry agent's
    assert card.name == "scribe"
    assert card.description == "Keeps notes in its workspace and reads them back."
    assert card.version
    assert card.capabilities.streaming
    assert list(card.default_input_modes) == ["text/plain"]
    assert list(card.default_output_modes) == ["text/plain"]
    skills = {skill.id: skill for skill in card.skills}
    assert skills["scribe"].description == card.description
    assert "file-system__write" in skills
    assert skills["file-system__read"].description.startswith("Read a text file")
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert scheme.scheme == "Bearer"
    assert [list(r.schemes) for r in card.security_requirements] == [["bearer"]]

    clerk = await A2ACardResolver(http, f"{base}/a2a/clerk").get_agent_card()
    assert clerk.description == "The clerk agent of the notes swarm."  # no description given
    assert clerk.supported_interfaces[0].url == f"{base}/a2a/clerk"


async def test_a_message_completes_a_task_and_its_context_continues_the_conversation(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe")
    noted = await only_task(client, user_says("note plan.txt buy milk"))
    assert noted.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_of(noted) == "noted in plan.txt"
    assert noted.id.startswith("req_")  # the request desk's id
    assert noted.context_id
    assert [m.parts[0].text for m in noted.history] == ["note plan.txt buy milk"]

    again = await only_task(client, user_says("read plan.txt", noted.context_id))
    assert answer_of(again) == "read: buy milk"  # the same conversation's workspace
    assert again.context_id == noted.context_id
    elsewhere = await only_task(client, user_says("read plan.txt"))
    assert elsewhere.context_id != noted.context_id
    assert answer_of(elsewhere).startswith("ERROR")  # a new conversation has no such note
    instances = {row.instance_key for row in swarm.operations.instances("scribe")}
    assert noted.context_id in instances

    fetched = await client.get_task(GetTaskRequest(id=noted.id))
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_of(fetched) == "noted in plan.txt"


async def test_a_failed_turn_fails_its_task_with_the_error(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe")
    task = await only_task(client, user_says("loop"))  # never answers within its Steps
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert not task.artifacts
    message = task.status.message
    assert "maxStepsPerTurn" in message.parts[0].text or "3" in message.parts[0].text
    assert message.metadata["code"] == "E_MAX_STEPS"


def collapsed(events: list[StreamResponse]) -> list[tuple[str, int]]:
    """Each event's kind and state (an artifact's: 0), runs of the same one as one."""
    out: list[tuple[str, int]] = []
    for event in events:
        kind = str(event.WhichOneof("payload"))
        state = event.task.status.state or event.status_update.status.state
        if not out or out[-1] != (kind, state):
            out.append((kind, state))
    return out


async def test_a_stream_shows_the_task_working_then_its_artifact_then_completed(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe", streaming=True)
    events = [event async for event in client.send_message(user_says("hello there"))]
    assert collapsed(events) == [
        ("task", TaskState.TASK_STATE_SUBMITTED),
        ("status_update", TaskState.TASK_STATE_WORKING),
        ("artifact_update", 0),
        ("status_update", TaskState.TASK_STATE_COMPLETED),
    ]
    pieces = [
        e.status_update.status.message.parts[0].text
        for e in events
        if e.status_update.status.message.parts
    ]
    assert len(pieces) > 1  # the model's text as it came, word by word
    assert "".join(pieces) == "scribe got: hello there"
    [artifact] = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert artifact.last_chunk
    assert artifact.artifact.parts[0].text == "scribe got: hello there"
    task_ids = {e.task.id or e.status_update.task_id or e.artifact_update.task_id for e in events}
    assert task_ids == {events[0].task.id}


def waiting_approval(task: Task) -> str:
    """The approval id an ``input-required`` task names."""
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    message = task.status.message
    approval_id = str(message.metadata["approvalId"])
    text = message.parts[0].text
    assert approval_id in text
    assert f"/v1/approvals/{approval_id}/approve" in text
    assert message.metadata["toolName"] == "file-system__write"
    return approval_id


async def test_an_approval_holds_the_task_in_input_required_until_decided_over_http(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    client, _ = await a2a_client(http, f"{base}/a2a/clerk")
    task = await only_task(client, user_says("note memo.txt approved text"))
    approval_id = waiting_approval(task)
    again = await client.get_task(GetTaskRequest(id=task.id))
    assert waiting_approval(again) == approval_id  # GetTask sees the wait too

    approved = await http.post(f"{base}/v1/approvals/{approval_id}/approve", json={})
    assert approved.status_code == 200, approved.text
    # The task id is the request's: the API waits for its answer, then GetTask has it.
    done = await http.get(f"{base}/v1/requests/{task.id}", params={"wait": 60})
    assert done.json()["state"] == "done"
    finished = await client.get_task(GetTaskRequest(id=task.id))
    assert finished.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_of(finished) == "noted in memo.txt"


async def test_a_streamed_task_waits_for_its_approval_then_goes_on_to_completion(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    client, _ = await a2a_client(http, f"{base}/a2a/clerk", streaming=True)
    seen: list[StreamResponse] = []
    async for event in client.send_message(user_says("note log.txt streamed")):
        seen.append(event)
        status = event.status_update.status
        if status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            approval_id = str(status.message.metadata["approvalId"])
            decided = await http.post(f"{base}/v1/approvals/{approval_id}/approve", json={})
            assert decided.status_code == 200, decided.text
    assert collapsed(seen) == [
        ("task", TaskState.TASK_STATE_SUBMITTED),
        ("status_update", TaskState.TASK_STATE_WORKING),
        ("status_update", TaskState.TASK_STATE_INPUT_REQUIRED),
        ("status_update", TaskState.TASK_STATE_WORKING),
        ("artifact_update", 0),
        ("status_update", TaskState.TASK_STATE_COMPLETED),
    ]
    [artifact] = [e.artifact_update for e in seen if e.HasField("artifact_update")]
    assert artifact.artifact.parts[0].text == "noted in log.txt"


async def test_a_task_is_cancelled_and_then_cannot_be_cancelled_again(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/clerk")
    task = await only_task(client, user_says("note held.txt never written"))
    waiting_approval(task)  # its Turn waits: still running
    cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    fetched = await client.get_task(GetTaskRequest(id=task.id))
    assert fetched.status.state == TaskState.TASK_STATE_CANCELED
    assert fetched.status.message.metadata["code"] == "CANCELLED"
    with pytest.raises(TaskNotCancelableError, match="ended already"):
        await client.cancel_task(CancelTaskRequest(id=task.id))
    with pytest.raises(TaskNotFoundError, match="no task"):
        await client.get_task(GetTaskRequest(id="req_" + "0" * 32))
    scribe, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe")
    with pytest.raises(TaskNotFoundError, match="no task"):  # a task of another agent
        await scribe.get_task(GetTaskRequest(id=task.id))


async def test_a_sent_again_message_finds_its_task_instead_of_a_second_turn(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe")
    request = user_says("note once.txt one")
    first = await only_task(client, request)
    second = await only_task(client, request)  # the same messageId: a retry
    assert second.id == first.id
    assert answer_of(second) == "noted in once.txt"


async def test_a_task_is_found_after_the_daemon_restarts(tmp_path: Path) -> None:
    async with a2a_swarm(tmp_path) as first, http_client() as http:
        client, _ = await a2a_client(http, f"{base_url(first)}/a2a/scribe")
        task = await only_task(client, user_says("note kept.txt across"))
    async with a2a_swarm(tmp_path) as second, http_client() as http:
        client, _ = await a2a_client(http, f"{base_url(second)}/a2a/scribe")
        found = await client.get_task(GetTaskRequest(id=task.id))
        assert found.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_of(found) == "noted in kept.txt"
        assert found.context_id == task.context_id


async def test_the_0_3_method_names_are_answered_too(swarm: Orchestrator) -> None:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

    methods: list[str] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            methods.append(json.loads(request.content)["method"])

    hooks = {"request": [record]}
    async with httpx.AsyncClient(headers=RPC_HEADERS, timeout=60, event_hooks=hooks) as http:
        card = await A2ACardResolver(http, f"{base_url(swarm)}/a2a/scribe").get_agent_card()
        card.supported_interfaces[0].protocol_version = "0.3"  # a client of the older protocol
        legacy = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        task = await only_task(legacy, user_says("hello old friend"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_of(task) == "scribe got: hello old friend"
        fetched = await legacy.get_task(GetTaskRequest(id=task.id))
        assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert methods == ["message/send", "tasks/get"]


async def test_what_is_not_offered_is_refused_with_its_a2a_error(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    url = f"{base_url(swarm)}/a2a/scribe"
    client, _ = await a2a_client(http, url)
    task = await only_task(client, user_says("hello"))
    refused = {
        "CreateTaskPushNotificationConfig": {"taskId": task.id, "url": "https://x.example/hook"},
        "GetTaskPushNotificationConfig": {"taskId": task.id, "id": "c1"},
        "ListTaskPushNotificationConfigs": {"taskId": task.id},
        "DeleteTaskPushNotificationConfig": {"taskId": task.id, "id": "c1"},
        "ListTasks": {},
        "GetExtendedAgentCard": {},
    }
    codes = {}
    for number, (method, params) in enumerate(refused.items()):
        body = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
        response = await rpc(http, url, json.dumps(body).encode())
        assert response.status_code == 200, response.text
        codes[method] = response.json()["error"]["code"]
    push_not_supported, unsupported = -32003, -32004  # A2A's error codes
    assert codes == {
        "CreateTaskPushNotificationConfig": push_not_supported,
        "GetTaskPushNotificationConfig": push_not_supported,
        "ListTaskPushNotificationConfigs": push_not_supported,
        "DeleteTaskPushNotificationConfig": push_not_supported,
        "ListTasks": unsupported,
        "GetExtendedAgentCard": unsupported,
    }


# -- hostile ---------------------------------------------------------------------------------


async def rpc(http: httpx.AsyncClient, url: str, body: bytes, **headers: str) -> httpx.Response:
    sent = {**RPC_HEADERS, "Content-Type": "application/json", **headers}
    return await http.post(url, content=body, headers=sent)


async def test_a_foreign_page_and_a_caller_without_the_token_are_refused(
    swarm: Orchestrator,
) -> None:
    base = base_url(swarm)
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}'
    async with httpx.AsyncClient(timeout=30) as bare:
        foreign = await rpc(bare, f"{base}/a2a/scribe", body, Origin="https://evil.example")
        assert foreign.status_code == 403
        assert foreign.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"
        for path in ("/.well-known/agent-card.json", "/a2a/scribe/.well-known/agent-card.json"):
            card = await bare.get(base + path)
            assert card.status_code == 401
        tokenless = await bare.post(
            f"{base}/a2a/scribe", content=body, headers={"Content-Type": "application/json"}
        )
        assert tokenless.status_code == 401
        assert tokenless.json()["error"]["code"] == "UNAUTHORIZED"
        form = await bare.post(
            f"{base}/a2a/scribe",
            content=body,
            headers={**RPC_HEADERS, "Content-Type": "text/plain"},
        )
        assert form.status_code == 415


def violations(error: dict[str, Any]) -> list[str]:
    """The fields a JSON-RPC error's ``google.rpc.BadRequest`` detail names."""
    [bad] = [d for d in error["data"] if d["@type"].endswith("google.rpc.BadRequest")]
    return [violation["field"] for violation in bad["fieldViolations"]]


async def test_bad_json_rpc_bodies_get_the_json_rpc_error_shape(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    url = f"{base_url(swarm)}/a2a/scribe"

    async def error_of(body: bytes) -> dict[str, Any]:
        response = await rpc(http, url, body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["jsonrpc"] == "2.0"
        assert set(answer) == {"jsonrpc", "id", "error"}, answer
        return dict(answer["error"])

    missing = await error_of(b'{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {}}')
    assert missing["code"] == -32602
    assert violations(missing) == ["message"]
    no_text = await error_of(
        b'{"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": '
        b'{"messageId": "m1", "role": "ROLE_USER", "parts": [{"url": "file:///etc/passwd"}]}}}'
    )
    assert no_text["code"] == -32602
    assert violations(no_text) == ["message.parts[0]"]
    not_a_message = await error_of(
        b'{"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": "hi"}}'
    )
    assert not_a_message["code"] == -32602
    assert "message.parts" in violations(not_a_message)
    wrong_type = await error_of(
        b'{"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": '
        b'{"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": 5}]}}}'
    )
    assert wrong_type["code"] == -32602
    assert "Failed to parse text field" in str(wrong_type["data"])
    unknown = await error_of(b'{"jsonrpc": "2.0", "id": 10, "method": "tasks/explode"}')
    assert unknown["code"] == -32601
    not_json = await error_of(b'{"jsonrpc": "2.0", ')
    assert not_json["code"] == -32700
    surrogate = await error_of(
        b'{"jsonrpc": "2.0", "id": 11, "method": "SendMessage", "params": {"message": '
        b'{"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "\\ud800"}]}}}'
    )
    assert surrogate["code"] == -32600
    assert "params.message.parts[0].text" in str(surrogate["data"])
    big = await rpc(http, url, b'{"pad": "' + b"x" * (1024 * 1024 + 1) + b'"}')
    assert big.status_code == 413


async def test_an_unknown_or_hidden_agent_is_not_found(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}'
    for agent in ("nobody", "backroom"):  # backroom shows only through the OpenAI door
        card = await http.get(f"{base}/a2a/{agent}/.well-known/agent-card.json")
        assert card.status_code == 404
        assert card.json()["error"]["code"] == "AGENT_NOT_FOUND"
        posted = await rpc(http, f"{base}/a2a/{agent}", body)
        assert posted.status_code == 404


async def test_a_task_of_a_running_turn_survives_its_dropped_stream(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    client, _ = await a2a_client(http, f"{base}/a2a/clerk", streaming=True)
    task_id = ""
    approval_id = ""
    async for event in client.send_message(user_says("note drop.txt later")):
        task_id = task_id or event.task.id
        status = event.status_update.status
        if status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            approval_id = str(status.message.metadata["approvalId"])
            break  # the caller goes away mid-stream
    assert approval_id
    # Back again: the task as it stands, then what comes once an operator decides.
    again: list[StreamResponse] = []
    async with asyncio.timeout(60):
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            again.append(event)
            if len(again) == 1:
                assert waiting_approval(event.task) == approval_id
                decided = await http.post(f"{base}/v1/approvals/{approval_id}/approve", json={})
                assert decided.status_code == 200, decided.text
    assert collapsed(again)[0] == ("task", TaskState.TASK_STATE_INPUT_REQUIRED)
    assert collapsed(again)[-2:] == [
        ("artifact_update", 0),
        ("status_update", TaskState.TASK_STATE_COMPLETED),
    ]
    plain, _ = await a2a_client(http, f"{base}/a2a/clerk")
    found = await plain.get_task(GetTaskRequest(id=task_id))
    assert found.status.state == TaskState.TASK_STATE_COMPLETED
    assert answer_of(found) == "noted in drop.txt"
    with pytest.raises(UnsupportedOperationError, match="not running here"):
        async for _ in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            pass


def test_the_client_snippet_of_the_docs_runs_against_a_daemon(tmp_path: Path) -> None:
    [snippet] = readme.section("A client in Python", DOC_PAGE).blocks_of("python")
    write_a2a_swarm(tmp_path)
    token = {"GOONDAN_API_TOKEN": TOKEN}
    args = ["--listen", "127.0.0.1:0", "--api-token-env", "GOONDAN_API_TOKEN"]
    daemon = Daemon(tmp_path, bundle="goondan.yaml", env=token, args=args)
    try:
        port = int(daemon.wait_for("http api listening")["port"])  # type: ignore[call-overload]
        daemon.wait_for("agent ready")
        env = {**os.environ, **token, "GOONDAN_URL": f"http://127.0.0.1:{port}"}
        done = subprocess.run(
            [sys.executable, "-c", snippet.text], env=env, capture_output=True, timeout=60
        )
    finally:
        daemon.stop()
    assert done.returncode == 0, done.stderr.decode()
    first, second = done.stdout.decode().splitlines()
    context = first.split("[")[1].split("]")[0]
    assert first == f"scribe [{context}]: scribe got: hello"
    assert second == f"scribe [{context}]: scribe got: hello again"


async def test_a_task_waiting_for_approval_goes_on_after_the_daemon_restarts(
    tmp_path: Path,
) -> None:
    async with a2a_swarm(tmp_path) as first, http_client() as http:
        client, _ = await a2a_client(http, f"{base_url(first)}/a2a/clerk")
        task = await only_task(client, user_says("note restart.txt survived"))
        approval_id = waiting_approval(task)
    async with a2a_swarm(tmp_path) as second, http_client() as http:
        base = base_url(second)
        client, _ = await a2a_client(http, f"{base}/a2a/clerk")
        found = await client.get_task(GetTaskRequest(id=task.id))
        assert waiting_approval(found) == approval_id  # still waiting, under the same id
        state = str(tmp_path / "state")  # decided by the operator's CLI this time
        decided = await asyncio.to_thread(
            run_cli, "approve", approval_id, "--state-dir", state, cwd=tmp_path
        )
        assert decided.returncode == 0, decided.stderr
        waited = await http.get(f"{base}/v1/requests/{task.id}", params={"wait": 60})
        assert waited.json()["state"] == "done"
        finished = await client.get_task(GetTaskRequest(id=task.id))
        assert finished.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_of(finished) == "noted in restart.txt"
        assert finished.context_id == task.context_id


async def test_return_immediately_answers_at_once_and_the_task_is_asked_for_later(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    base = base_url(swarm)
    client, _ = await a2a_client(http, f"{base}/a2a/scribe")
    request = user_says("note soon.txt later")
    request.configuration.return_immediately = True
    task = await only_task(client, request)
    # At once: working, unless the Turn was even quicker than the answer.
    assert task.status.state in (TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED)
    waited = await http.get(f"{base}/v1/requests/{task.id}", params={"wait": 60})
    assert waited.json()["state"] == "done"
    finished = await client.get_task(GetTaskRequest(id=task.id))
    assert answer_of(finished) == "noted in soon.txt"


async def test_a_streamed_task_whose_turn_fails_ends_failed_without_an_artifact(
    swarm: Orchestrator, http: httpx.AsyncClient
) -> None:
    client, _ = await a2a_client(http, f"{base_url(swarm)}/a2a/scribe", streaming=True)
    events = [event async for event in client.send_message(user_says("loop"))]
    assert collapsed(events) == [
        ("task", TaskState.TASK_STATE_SUBMITTED),
        ("status_update", TaskState.TASK_STATE_WORKING),
        ("status_update", TaskState.TASK_STATE_FAILED),
    ]
    assert events[-1].status_update.status.message.metadata["code"] == "E_MAX_STEPS"


async def test_a_daemon_stopping_ends_an_open_stream_and_its_task_waits_for_the_next(
    tmp_path: Path,
) -> None:
    seen: list[StreamResponse] = []
    parked = asyncio.Event()

    async def follow(base: str) -> None:
        async with http_client() as http:
            client, _ = await a2a_client(http, f"{base}/a2a/clerk", streaming=True)
            async for event in client.send_message(user_says("note stop.txt later")):
                seen.append(event)
                if event.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                    parked.set()

    async with a2a_swarm(tmp_path) as first:
        stream = asyncio.create_task(follow(base_url(first)))
        async with asyncio.timeout(30):
            await parked.wait()
    async with asyncio.timeout(30):
        await stream  # the stream ended with the daemon, without a final status
    assert collapsed(seen)[-1] == ("status_update", TaskState.TASK_STATE_INPUT_REQUIRED)
    async with a2a_swarm(tmp_path) as second, http_client() as http:
        client, _ = await a2a_client(http, f"{base_url(second)}/a2a/clerk")
        found = await client.get_task(GetTaskRequest(id=seen[0].task.id))
        waiting_approval(found)
