"""The AG-UI front door of a real daemon (the Orchestrator serving HTTP on loopback TCP),
read with a real HTTP client: each event of a stream is decoded with the official
``ag-ui-protocol`` pydantic types. The protocol has no official Python client (its clients
are TypeScript), so the package's models are the client here: a stream they do not read is
not AG-UI."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from ag_ui.core import (
    BaseEvent,
    Context,
    EventType,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

from orchestrator.daemon import Orchestrator
from tests.support.agui_swarm import TOKEN, agui_swarm, base_url, run_events
from tests.support.daemon import Daemon

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with agui_swarm(tmp_path) as orchestrator:
        yield orchestrator


@pytest.fixture
async def http(swarm: Orchestrator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url(swarm), headers=AUTH, timeout=60) as client:
        yield client


def asking(text: str, thread: str = "thread-1", **more: object) -> RunAgentInput:
    """A run whose last user message is ``text``."""
    messages = [UserMessage(id=f"m-{uuid.uuid4().hex[:8]}", content=text)]
    return RunAgentInput(
        thread_id=thread, run_id=f"run-{uuid.uuid4().hex[:8]}", messages=messages, **more
    )


def kinds(events: list[BaseEvent]) -> list[EventType]:
    return [event.type for event in events]


def assert_well_formed(events: list[BaseEvent]) -> None:
    """RUN_STARTED first, one closing event last; text messages and Steps balanced."""
    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    assert [e for e in events if e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)] == [
        events[-1]
    ]
    messages: list[str] = []
    steps: list[str] = []
    for event in events:
        if event.type == EventType.TEXT_MESSAGE_START:
            messages.append(event.message_id)  # type: ignore[attr-defined]
        elif event.type == EventType.TEXT_MESSAGE_CONTENT:
            assert messages[-1:] == [event.message_id]  # type: ignore[attr-defined]
        elif event.type == EventType.TEXT_MESSAGE_END:
            assert messages.pop() == event.message_id  # type: ignore[attr-defined]
        elif event.type == EventType.STEP_STARTED:
            steps.append(event.step_name)  # type: ignore[attr-defined]
        elif event.type == EventType.STEP_FINISHED:
            steps.remove(event.step_name)  # type: ignore[attr-defined]
    assert (messages, steps) == ([], [])


def text_of(events: list[BaseEvent]) -> str:
    return "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))


async def test_a_run_streams_its_steps_and_text_then_finishes_with_the_answer(
    http: httpx.AsyncClient,
) -> None:
    response, events = await run_events(http, "scribe", asking("hello there"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-goondan-request-id"].startswith("req_")
    assert_well_formed(events)
    assert EventType.STEP_STARTED in kinds(events)
    assert text_of(events) == "heard: hello there"
    starts = [e for e in events if isinstance(e, TextMessageStartEvent)]
    assert len(starts) == 1
    contents = [e for e in events if isinstance(e, TextMessageContentEvent)]
    assert len(contents) > 1  # streamed word by word, under one stable message id
    assert {e.message_id for e in contents} == {starts[0].message_id}
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.result == "heard: hello there"
    assert finished.outcome is None
    assert events[0].thread_id == "thread-1"  # type: ignore[attr-defined]


async def test_a_thread_is_one_conversation_across_runs(
    http: httpx.AsyncClient, swarm: Orchestrator
) -> None:
    _, first = await run_events(http, "scribe", asking("write note.txt kept", "t-memory"))
    assert first[-1].result == "wrote 4 bytes to note.txt"  # type: ignore[attr-defined]
    _, again = await run_events(http, "scribe", asking("read note.txt", "t-memory"))
    assert again[-1].result == "read: kept"  # type: ignore[attr-defined]
    _, elsewhere = await run_events(http, "scribe", asking("read note.txt", "t-other"))
    assert str(elsewhere[-1].result).startswith("ERROR")  # type: ignore[attr-defined]
    listed = await http.get("/v1/instances", params={"agent": "scribe"})
    rows = {row["instanceKey"]: row for row in listed.json()["instances"]}
    conversation = Path(rows["t-memory"]["directory"]) / "conversation"
    held = "".join(
        (conversation / name).read_text()
        for name in ("base.jsonl", "events.jsonl")
        if (conversation / name).exists()
    )
    assert "write note.txt kept" in held
    assert "read note.txt" in held


async def test_the_agents_tool_calls_become_tool_call_events(http: httpx.AsyncClient) -> None:
    _, events = await run_events(http, "scribe", asking("write plan.md step one"))
    assert_well_formed(events)
    order = [
        e.type
        for e in events
        if e.type.value.startswith("TOOL_CALL") or e.type.value.startswith("STEP")
    ]
    assert order == [
        EventType.STEP_STARTED,
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.TOOL_CALL_RESULT,
        EventType.STEP_FINISHED,
        EventType.STEP_STARTED,
        EventType.STEP_FINISHED,
    ]
    [start] = [e for e in events if isinstance(e, ToolCallStartEvent)]
    [args] = [e for e in events if isinstance(e, ToolCallArgsEvent)]
    [result] = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert start.tool_call_name == "file-system__write"
    assert '"path": "plan.md"' in args.delta
    assert result.tool_call_id == start.tool_call_id == args.tool_call_id
    assert "plan.md" in str(result.content)


async def test_a_delegated_agents_work_is_not_shown_as_the_runs_own(
    http: httpx.AsyncClient,
) -> None:
    _, events = await run_events(http, "scribe", asking("ask guarded hi"))
    assert_well_formed(events)
    [start] = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert start.tool_call_name == "agents__request"
    assert events[-1].result == "heard: hi"  # type: ignore[attr-defined]
    assert text_of(events) == "heard: hi"  # guarded's own streamed text is not relayed
    steps = [e for e in events if e.type == EventType.STEP_STARTED]
    assert len(steps) == 2  # scribe's two Steps, none of guarded's


async def interrupted(http: httpx.AsyncClient, thread: str) -> RunFinishedEvent:
    _, events = await run_events(http, "guarded", asking("write secret.txt launch", thread))
    assert_well_formed(events)
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    return finished


async def test_an_approval_is_an_interrupt_answered_by_a_resumed_run(
    http: httpx.AsyncClient,
) -> None:
    finished = await interrupted(http, "t-approve")
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    [interrupt] = finished.outcome.interrupts
    assert interrupt.id.startswith("apr_")
    assert interrupt.reason == "tool_approval"
    goondan = (interrupt.metadata or {})["goondan"]
    assert goondan["tool"] == "file-system__write"
    assert goondan["arguments"] == {"path": "secret.txt", "content": "launch"}
    pending = await http.get(f"/v1/approvals/{interrupt.id}")
    assert pending.json()["approval"]["status"] == "pending"

    answer = ResumeEntry(
        interrupt_id=interrupt.id,
        status="resolved",
        payload={"approved": True, "arguments": {"path": "secret.txt", "content": "go"}},
    )
    response, events = await run_events(
        http, "guarded", asking("(resumed)", "t-approve", resume=[answer])
    )
    assert response.status_code == 200
    assert_well_formed(events)
    assert [e.name for e in events if e.type == EventType.CUSTOM] == [  # type: ignore[attr-defined]
        "goondan.approval.decided"
    ]
    [start] = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert start.tool_call_name == "file-system__write"
    assert events[-1].result == "wrote 2 bytes to secret.txt"  # type: ignore[attr-defined]
    decided = await http.get(f"/v1/approvals/{interrupt.id}")
    assert decided.json()["approval"]["status"] == "approved"


async def test_a_rejection_through_the_resumed_run_reaches_the_model(
    http: httpx.AsyncClient,
) -> None:
    finished = await interrupted(http, "t-reject")
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    interrupt = finished.outcome.interrupts[0]
    answer = ResumeEntry(
        interrupt_id=interrupt.id, status="resolved", payload={"approved": False, "reason": "no"}
    )
    _, events = await run_events(http, "guarded", asking("", "t-reject", resume=[answer]))
    assert_well_formed(events)
    assert str(events[-1].result).startswith("ERROR E_TOOL_REJECTED")  # type: ignore[attr-defined]


async def test_an_interrupt_decided_through_another_door_resumes_as_it_stands(
    http: httpx.AsyncClient,
) -> None:
    finished = await interrupted(http, "t-elsewhere")
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    interrupt = finished.outcome.interrupts[0]
    decided = await http.post(
        f"/v1/approvals/{interrupt.id}/approve", params={"wait": "1"}, json={}
    )
    assert decided.status_code == 200
    assert decided.json()["turn"]["output"] == "wrote 6 bytes to secret.txt"
    # The front end still resumes its run, and is told how the Turn ended.
    answer = ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})
    _, events = await run_events(http, "guarded", asking("", "t-elsewhere", resume=[answer]))
    assert_well_formed(events)
    assert events[-1].result == "wrote 6 bytes to secret.txt"  # type: ignore[attr-defined]
    assert text_of(events) == "wrote 6 bytes to secret.txt"


async def test_a_failing_turn_ends_the_run_with_run_error(http: httpx.AsyncClient) -> None:
    response, events = await run_events(http, "scribe", asking("break"))
    assert response.status_code == 200
    assert_well_formed(events)
    failed = events[-1]
    assert isinstance(failed, RunErrorEvent)
    assert failed.code == "E_MODEL_SCRIPTED_FAILURE"
    assert "the model is down" in failed.message


async def test_context_follows_the_input(http: httpx.AsyncClient) -> None:
    run = asking("hi", context=[Context(description="page", value="settings")])
    _, events = await run_events(http, "scribe", run)
    assert events[-1].result == "heard: hi\n\npage: settings"  # type: ignore[attr-defined]


async def test_an_idempotent_retry_replays_the_first_runs_answer(
    http: httpx.AsyncClient,
) -> None:
    run = asking("write once.txt one", "t-once")
    key = {"Idempotency-Key": "agui-once"}
    first, events = await run_events(http, "scribe", run, key)
    again, replayed = await run_events(http, "scribe", run, key)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["x-goondan-request-id"] == first.headers["x-goondan-request-id"]
    assert replayed[-1].result == events[-1].result  # type: ignore[attr-defined]
    assert_well_formed(replayed)
    live = [e.message_id for e in events if isinstance(e, TextMessageStartEvent)]
    again_ids = [e.message_id for e in replayed if isinstance(e, TextMessageStartEvent)]
    assert again_ids == live[-1:]  # the answer's message keeps its id
    other, _ = await run_events(http, "scribe", asking("something else", "t-once"), key)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"


# -- hostile --------------------------------------------------------------------------------


async def test_a_foreign_origin_is_refused(http: httpx.AsyncClient) -> None:
    response, _ = await run_events(http, "scribe", asking("hi"), {"Origin": "https://evil.example"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


async def test_a_run_without_the_token_is_refused(swarm: Orchestrator) -> None:
    async with httpx.AsyncClient(base_url=base_url(swarm), timeout=30) as anonymous:
        response, _ = await run_events(anonymous, "scribe", asking("hi"))
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runId": "r", "messages": []}, "threadId"),
        ({"threadId": "t", "runId": "r", "messages": "hi"}, "messages"),
        (
            {"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "user"}]},
            "messages[0].content",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "1", "role": "user", "content": 5}],
            },
            "messages[0].content",
        ),
        ({"threadId": "t", "runId": "r", "messages": [], "tools": [{"name": 3}]}, "tools[0]"),
        ({"threadId": 7, "runId": "r", "messages": []}, "threadId"),
        ({"threadId": " ", "runId": "r", "messages": []}, "threadId"),
        ({"threadId": "t", "runId": "r", "messages": []}, "messages"),
        (
            {"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "x"}]},
            "resume[0].status",
        ),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [],
                "resume": [{"interruptId": "apr_0000000000000000", "status": "resolved"}],
            },
            "resume[0].interruptId",
        ),
    ],
)
async def test_a_bad_body_is_400_naming_the_field(
    http: httpx.AsyncClient, body: dict[str, object], field: str
) -> None:
    response = await http.post("/ag-ui/scribe", json=body)
    assert response.status_code == 400, response.text
    detail = response.json()["error"]
    assert detail["code"] == "BAD_REQUEST"
    assert detail["field"].startswith(field), detail


async def test_raw_bytes_that_are_not_json_are_refused(http: httpx.AsyncClient) -> None:
    headers = {"Content-Type": "application/json"}
    response = await http.post("/ag-ui/scribe", content=b"{not json", headers=headers)
    assert response.status_code == 400
    oversize = await http.post("/ag-ui/scribe", content=b"[" * (9 * 1024 * 1024), headers=headers)
    assert oversize.status_code == 413


async def test_unknown_and_unexposed_agents_are_404(http: httpx.AsyncClient) -> None:
    for agent in ("nobody", "backroom"):
        response, _ = await run_events(http, agent, asking("hi"))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "AGENT_NOT_FOUND"
    # The agent hidden from the front doors still answers on the daemon's own API.
    own = await http.post("/v1/agents/backroom/requests", json={"input": "hi"})
    assert own.json()["output"] == "heard: hi"


async def test_an_accept_without_event_streams_is_406(http: httpx.AsyncClient) -> None:
    response, _ = await run_events(http, "scribe", asking("hi"), {"Accept": "application/json"})
    assert response.status_code == 406


async def test_a_resume_on_another_thread_decides_nothing(http: httpx.AsyncClient) -> None:
    finished = await interrupted(http, "t-mine")
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    interrupt = finished.outcome.interrupts[0]
    answer = ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})
    response, _ = await run_events(http, "guarded", asking("", "t-yours", resume=[answer]))
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "resume[0].interruptId"
    still = await http.get(f"/v1/approvals/{interrupt.id}")
    assert still.json()["approval"]["status"] == "pending"
    await asyncio.sleep(0)


async def test_an_approval_in_a_delegated_agent_interrupts_the_run(
    http: httpx.AsyncClient,
) -> None:
    _, events = await run_events(http, "scribe", asking("ask guarded write deep.txt x", "t-deep"))
    assert_well_formed(events)
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    [interrupt] = finished.outcome.interrupts
    assert (interrupt.metadata or {})["goondan"]["agent"] == "guarded"
    answer = ResumeEntry(interrupt_id=interrupt.id, status="cancelled")
    _, rest = await run_events(http, "scribe", asking("", "t-deep", resume=[answer]))
    assert_well_formed(rest)
    assert str(rest[-1].result).startswith("ERROR E_TOOL_REJECTED")  # type: ignore[attr-defined]


def test_without_the_extra_the_route_names_it(tmp_path: Path) -> None:
    """A daemon whose Python cannot import ``ag_ui`` starts, and the door says what to
    install."""
    shadow = tmp_path / "shadow" / "ag_ui"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('ag-ui-protocol is not installed')\n")
    root = Path(__file__).resolve().parents[3]
    path = os.pathsep.join([str(shadow.parent), str(root), os.environ.get("PYTHONPATH", "")])
    daemon = Daemon(tmp_path, env={"PYTHONPATH": path})
    try:
        daemon.wait_for("http api listening")
        transport = httpx.HTTPTransport(uds=str(tmp_path / ".goondan" / "api.sock"))
        with httpx.Client(transport=transport, base_url="http://goondan", timeout=30) as client:
            body = asking("hi").model_dump(mode="json", by_alias=True)
            response = client.post("/ag-ui/alpha", json=body)
            assert response.status_code == 501
            assert "pip install 'goondan-py[agui]'" in response.json()["error"]["message"]
            own = client.post("/v1/agents/alpha/requests", json={"input": "hi"})
            assert own.json()["output"] == "alpha got: hi"
    finally:
        daemon.stop()
