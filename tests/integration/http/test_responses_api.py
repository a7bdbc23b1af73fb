"""The OpenAI Responses API door against the real in-process Orchestrator on a TCP listener
(loopback, with a token), driven by the official ``openai`` client and the OpenAI Agents SDK;
hostile cases send raw HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from orchestrator.daemon import Orchestrator
from tests.support.approvals import approval_swarm, watching
from tests.support.daemon import Daemon
from tests.support.listening import serving, tcp_url
from tests.support.readme import section
from tests.support.swarm import write_swarm

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "front-doors" / "responses.md"
TOKEN = "sk-responses-door"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with serving(write_swarm(tmp_path), TOKEN) as orchestrator:
        yield orchestrator


base_of = tcp_url


@pytest.fixture
async def client(swarm: Orchestrator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=base_of(swarm) + "/v1", api_key=TOKEN, max_retries=0, timeout=60
    ) as made:
        yield made


@pytest.fixture
async def http(swarm: Orchestrator) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=base_of(swarm), headers=AUTH, timeout=30) as made:
        yield made


async def conversation_of(http: httpx2.AsyncClient, agent: str, key: str) -> str:
    """The text of an instance's conversation on disk."""
    rows = (await http.get("/v1/instances")).json()["instances"]
    [row] = [r for r in rows if r["agentName"] == agent and r["instanceKey"] == key]
    conversation = Path(row["directory"]) / "conversation"
    return "".join(p.read_text() for p in sorted(conversation.glob("*.jsonl")))


async def test_a_response_is_answered_kept_and_retrieved(
    client: openai.AsyncOpenAI, http: httpx2.AsyncClient
) -> None:
    raw = await client.responses.with_raw_response.create(
        model="beta", input="hello there", metadata={"ticket": "T-1"}
    )
    response = raw.parse()
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == "beta"
    assert response.output_text == "beta got: hello there"
    assert response.metadata == {"ticket": "T-1"}
    assert response.previous_response_id is None
    assert response.error is None
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    [message] = response.output
    assert message.type == "message"
    assert message.role == "assistant"
    request_id = raw.headers["X-Goondan-Request-Id"]
    assert response.id == "resp_" + request_id.removeprefix("req_")

    again = await client.responses.retrieve(response.id)
    assert (again.id, again.status, again.output_text) == (
        response.id,
        "completed",
        "beta got: hello there",
    )
    assert again.metadata == {"ticket": "T-1"}

    shown = (await http.get(f"/v1/requests/{request_id}")).json()
    assert shown["state"] == "done"
    assert shown["answer"]["object"] == "response"
    assert shown["answer"]["id"] == response.id


async def test_the_swarms_name_names_the_entry_agent_and_instructions_come_first(
    client: openai.AsyncOpenAI,
) -> None:
    response = await client.responses.create(
        model="goondan", input="hi", instructions="Answer in one line."
    )
    assert response.model == "alpha"
    assert response.instructions == "Answer in one line."
    # The instructions are put before the input, a blank line between.
    assert response.output_text == "alpha got: Answer in one line.\n\nhi"


async def test_previous_response_id_continues_the_same_conversation(
    client: openai.AsyncOpenAI, http: httpx2.AsyncClient
) -> None:
    first = await client.responses.create(model="beta", input="remember the milk", user="kitchen")
    history: Any = [  # as a client that keeps the history itself sends it
        {"role": "user", "content": "remember the milk"},
        {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
        {"role": "user", "content": [{"type": "input_text", "text": "what did I say?"}]},
    ]
    second = await client.responses.create(
        model="beta", input=history, previous_response_id=first.id
    )
    assert second.output_text == "beta got: what did I say?"
    assert second.previous_response_id == first.id
    assert (await client.responses.retrieve(second.id)).previous_response_id == first.id
    # Both Turns ran in the instance of the first: the agent's conversation holds them both.
    conversation = await conversation_of(http, "beta", "kitchen")
    assert "remember the milk" in conversation
    assert "what did I say?" in conversation
    assert conversation.index("remember the milk") < conversation.index("what did I say?")


async def test_the_instance_header_names_the_conversation_and_must_agree(
    client: openai.AsyncOpenAI, http: httpx2.AsyncClient
) -> None:
    desk = {"X-Goondan-Instance": "desk-7"}
    first = await client.responses.create(model="beta", input="on desk seven", extra_headers=desk)
    assert "on desk seven" in await conversation_of(http, "beta", "desk-7")
    with pytest.raises(openai.BadRequestError) as other_instance:
        await client.responses.create(
            model="beta",
            input="elsewhere",
            previous_response_id=first.id,
            extra_headers={"X-Goondan-Instance": "desk-8"},
        )
    assert other_instance.value.param == "user"
    with pytest.raises(openai.BadRequestError) as other_agent:
        await client.responses.create(model="alpha", input="hi", previous_response_id=first.id)
    assert other_agent.value.param == "model"
    same = await client.responses.create(
        model="beta", input="still here", previous_response_id=first.id, extra_headers=desk
    )
    assert same.status == "completed"
    assert "still here" in await conversation_of(http, "beta", "desk-7")


async def test_a_stream_sends_the_typed_events_in_order(client: openai.AsyncOpenAI) -> None:
    async with client.responses.stream(model="beta", input="stream these words") as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    kinds = [event.type for event in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1  # the scripted model streams a word a chunk
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(events)))
    assert "".join(deltas) == final.output_text == "beta got: stream these words"
    assert final.status == "completed"
    assert (await client.responses.retrieve(final.id)).output_text == final.output_text


async def test_create_with_stream_true_yields_the_raw_events(client: openai.AsyncOpenAI) -> None:
    stream = await client.responses.create(model="beta", input="raw words", stream=True)
    kinds, text = [], ""
    async with stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            if event.type == "response.completed":
                assert event.response.output_text == "beta got: raw words"
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert text == "beta got: raw words"


async def test_the_agents_tool_calls_are_output_items_when_asked_for(
    client: openai.AsyncOpenAI,
) -> None:
    include: Any = ["goondan.tool_calls"]
    response = await client.responses.create(model="beta", input="slow 0.01", include=include)
    call, result, message = response.output
    assert call.type == "function_call"
    assert result.type == "function_call_output"
    assert call.name == "fault__slow"
    assert json.loads(call.arguments) == {"seconds": 0.01}
    assert result.call_id == call.call_id
    assert message.type == "message"
    assert response.output_text == "slow done"

    async with client.responses.stream(model="beta", input="slow 0.01", include=include) as stream:
        added = [e.item.type async for e in stream if e.type == "response.output_item.added"]
        final = await stream.get_final_response()
    assert added == ["function_call", "function_call_output", "message"]
    assert [item.type for item in final.output] == added
    # Without asking, only the message: a client would take a function_call as its own to run.
    plain = await client.responses.create(model="beta", input="slow 0.01")
    assert [item.type for item in plain.output] == ["message"]


async def test_a_background_response_is_in_progress_then_retrieved(
    client: openai.AsyncOpenAI, http: httpx2.AsyncClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    started = await client.responses.create(model="beta", input=f"hold {gate}", background=True)
    assert (started.status, started.background) == ("in_progress", True)
    # The Turn waits for the gate: the response stays in progress until it is opened.
    assert (await client.responses.retrieve(started.id)).status == "in_progress"
    gate.write_text("open")
    request_id = "req_" + started.id.removeprefix("resp_")
    waited = await http.get(f"/v1/requests/{request_id}", params={"wait": 30})
    assert waited.json()["state"] == "done"
    found = await client.responses.retrieve(started.id)
    assert found.status == "completed"
    assert found.completed_at is not None


async def test_a_background_response_can_be_cancelled(
    client: openai.AsyncOpenAI, tmp_path: Path
) -> None:
    started = await client.responses.create(
        model="beta", input=f"hold {tmp_path / 'never'}", background=True
    )
    cancelled = await client.responses.cancel(started.id)
    assert cancelled.id == started.id
    assert cancelled.status == "cancelled"
    assert cancelled.error is not None
    assert str(cancelled.error.code) == "CANCELLED"  # our code, beyond OpenAI's list
    assert (await client.responses.retrieve(started.id)).status == "cancelled"
    again = await client.responses.cancel(started.id)  # ended already: as it stands
    assert again.status == "cancelled"
    with pytest.raises(openai.NotFoundError):
        await client.responses.cancel("resp_" + "0" * 32)


async def test_an_idempotency_key_answers_a_retry_with_the_first_response(
    client: openai.AsyncOpenAI,
) -> None:
    key = {"Idempotency-Key": "order-42"}
    first = await client.responses.with_raw_response.create(
        model="beta", input="once only", extra_headers=key
    )
    again = await client.responses.with_raw_response.create(
        model="beta", input="once only", extra_headers=key
    )
    assert again.parse().id == first.parse().id
    assert again.headers["Idempotent-Replayed"] == "true"
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await client.responses.create(model="beta", input="another body", extra_headers=key)
    assert refused.value.code == "IDEMPOTENCY_KEY_REUSED"


async def test_an_approval_decided_through_another_door_lets_the_response_answer(
    tmp_path: Path,
) -> None:
    options: dict[str, Any] = {"api_listen": "127.0.0.1:0", "api_token": TOKEN}
    async with approval_swarm(tmp_path, **options) as swarm, watching(swarm) as events:
        base = base_of(swarm)
        async with (
            openai.AsyncOpenAI(base_url=base + "/v1", api_key=TOKEN, max_retries=0) as client,
            httpx2.AsyncClient(base_url=base, headers=AUTH, timeout=30) as http,
        ):
            waiting = asyncio.create_task(
                client.responses.create(model="clerk", input="write notes.txt hello")
            )
            requested = await events.next("approval.requested")
            assert not waiting.done()
            approve = f"/v1/approvals/{requested['approvalId']}/approve"
            decided = await http.post(approve, json={})
            assert decided.status_code == 200, decided.text
            async with asyncio.timeout(30):
                response = await waiting
    assert response.status == "completed"
    assert response.output_text.startswith("wrote 5 bytes")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "no model"}, "model"),
        ({"model": "beta"}, "input"),
        ({"model": "beta", "input": 5}, "input"),
        ({"model": 7, "input": "hi"}, "model"),
        ({"model": "beta", "input": [{"type": "image_generation_call"}]}, "input[0].type"),
        ({"model": "beta", "input": [{"role": "user", "content": 3}]}, "input[0].content"),
        ({"model": "beta", "input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        (
            {"model": "beta", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].type",
        ),
        ({"model": "beta", "input": [{"role": "assistant", "content": "hi"}]}, "input[0]"),
        ({"model": "beta", "input": "hi", "instructions": ["x"]}, "instructions"),
        ({"model": "beta", "input": "hi", "stream": "yes"}, "stream"),
        ({"model": "beta", "input": "hi", "metadata": {"k": 1}}, "metadata.k"),
        (
            {"model": "beta", "input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}},
            "metadata",
        ),
        ({"model": "beta", "input": "hi", "tools": [{"type": "function", "name": "f"}]}, "tools"),
        (
            {"model": "beta", "input": "hi", "previous_response_id": "resp_nope"},
            "previous_response_id",
        ),
    ],
)
async def test_a_bad_body_is_answered_in_the_openai_shape_naming_the_field(
    client: openai.AsyncOpenAI, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.post("/responses", body=body, cast_to=object)
    assert refused.value.param == param
    assert refused.value.type == "invalid_request_error"
    error = refused.value.body
    assert isinstance(error, dict)
    assert set(error) == {"message", "type", "param", "code"}


async def test_unknown_models_and_responses_are_404_in_the_openai_shape(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.create(model="gamma", input="hi")
    assert missing.value.param == "model"
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.responses.retrieve("resp_" + "0" * 32)
    assert unknown.value.code == "REQUEST_NOT_FOUND"
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve("not-an-id")


async def test_a_failed_turn_is_a_502_or_a_failed_event(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        await client.responses.create(model="beta", input="crash")
    assert failed.value.status_code == 502
    assert failed.value.code == "AGENT_CRASHED"


async def test_a_foreign_origin_and_a_missing_token_are_refused(swarm: Orchestrator) -> None:
    body = {"model": "beta", "input": "hi"}
    async with httpx2.AsyncClient(base_url=base_of(swarm), timeout=30) as anonymous:
        assert (await anonymous.post("/v1/responses", json=body)).status_code == 401
        foreign = {**AUTH, "Origin": "https://evil.example"}
        refused = await anonymous.post("/v1/responses", json=body, headers=foreign)
        assert refused.status_code == 403
        assert (await anonymous.get("/v1/responses/resp_x", headers=foreign)).status_code == 403
        big = {"model": "beta", "input": "x" * (2 * 1024 * 1024)}
        assert (await anonymous.post("/v1/responses", json=big, headers=AUTH)).status_code == 413
    async with openai.AsyncOpenAI(
        base_url=base_of(swarm) + "/v1", api_key="wrong", max_retries=0
    ) as intruder:
        with pytest.raises(openai.AuthenticationError):
            await intruder.responses.create(model="beta", input="hi")


async def test_the_agents_sdk_runs_with_the_swarm_as_its_model_provider(
    client: openai.AsyncOpenAI,
) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)  # no trace export: nothing leaves this machine
    model = OpenAIResponsesModel(model="beta", openai_client=client)
    agent = Agent(name="Assistant", instructions="You are beta.", model=model)
    result = await Runner.run(agent, "hello from the agents sdk")
    assert result.final_output == "beta got: You are beta.\n\nhello from the agents sdk"
    # The SDK's own way of continuing a conversation: previous_response_id.
    first = result.last_response_id
    assert first is not None
    then = await Runner.run(agent, "and again", previous_response_id=first)
    assert then.final_output == "beta got: You are beta.\n\nand again"
    assert then.last_response_id is not None
    kept = await client.responses.retrieve(then.last_response_id)
    assert kept.previous_response_id == first


async def test_a_turn_failing_mid_stream_ends_in_response_failed(
    client: openai.AsyncOpenAI,
) -> None:
    stream = await client.responses.create(model="beta", input="say bye then crash", stream=True)
    async with stream:
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    assert str(failed.response.error.code) == "AGENT_CRASHED"


async def test_the_agents_sdk_streams_from_the_swarm(client: openai.AsyncOpenAI) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    agent = Agent(name="Assistant", model=OpenAIResponsesModel(model="beta", openai_client=client))
    run = Runner.run_streamed(agent, "stream to the sdk")
    deltas = [
        event.data.delta
        async for event in run.stream_events()
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
    ]
    assert "".join(deltas) == run.final_output == "beta got: stream to the sdk"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"model": "beta", "input": "\\ud800x"}', "input"),
        (
            b'{"model": "beta", "input": "hi", "metadata": ' + b"[" * 100 + b"]" * 100 + b"}",
            "metadata" + "[0]" * 63,
        ),
        (b'{"model": "beta", "input": ', None),
        (b'["model", "beta"]', None),
    ],
)
async def test_hostile_bytes_are_answered_in_the_openai_shape(
    http: httpx2.AsyncClient, raw: bytes, param: str | None
) -> None:
    headers = {"Content-Type": "application/json"}
    refused = await http.post("/v1/responses", content=raw, headers=headers)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    plain = await http.post(
        "/v1/responses", content=b"model=beta", headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 415


def test_the_docs_snippet_runs_against_a_daemon(tmp_path: Path) -> None:
    """docs/front-doors/responses.md's snippet, as written, against the example swarm run by
    a daemon process (only its port is the one this test's daemon got)."""
    shutil.copy(REPO / "goondan.yaml.example", tmp_path / "goondan.yaml")
    daemon = Daemon(tmp_path, bundle="goondan.yaml", args=["--listen", "127.0.0.1:0"])
    try:
        port = daemon.wait_for("http api listening")["port"]
        [block] = section("Try it", DOCS).blocks_of("python")
        snippet = block.text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = subprocess.run(
            [sys.executable, "-"],
            input=snippet,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
    finally:
        daemon.stop()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Done. The worker reports: wrote 5 bytes to notes.txt"
    assert lines[1] == "['function_call', 'function_call_output', 'message']"
    assert lines[2] == "completed"
    assert lines[3].startswith("Done. The worker reports: wrote 8 bytes")


async def test_a_dropped_stream_is_resumed_from_its_last_event_id(
    client: openai.AsyncOpenAI, http: httpx2.AsyncClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    body: Any = {"model": "beta", "input": f"say hello then hold {gate}", "stream": True}
    last_id = ""
    async with client.responses.with_streaming_response.create(**body) as raw:
        request_id = raw.headers["X-Goondan-Request-Id"]
        async for line in raw.iter_lines():
            if line.startswith("id: "):
                last_id = line.removeprefix("id: ")
            if line == "event: response.output_text.delta":
                break  # the connection drops here, mid-Turn
    assert last_id.isdigit()
    gate.write_text("open")  # the Turn runs on without its first client
    resumed = await http.get(
        f"/v1/requests/{request_id}/events", headers={"Last-Event-ID": last_id}
    )
    assert resumed.status_code == 200
    assert "event: answer" in resumed.text
    assert "released" in resumed.text
    assert '"text": "hello' not in resumed.text  # what the client had is not sent again
    response_id = "resp_" + request_id.removeprefix("req_")
    found = await client.responses.retrieve(response_id)
    assert found.status == "completed"
    assert found.output_text == "released"


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[openai.AsyncOpenAI, httpx2.AsyncClient]]:
    """The test swarm of ``tmp_path`` in a daemon of its own state directory, and its clients."""
    orchestrator = Orchestrator.from_bundle(
        tmp_path / "goondan.yaml",
        state_dir=tmp_path / "state",
        api_listen="127.0.0.1:0",
        api_token=TOKEN,
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    base = base_of(orchestrator)
    try:
        async with (
            openai.AsyncOpenAI(base_url=base + "/v1", api_key=TOKEN, max_retries=0) as client,
            httpx2.AsyncClient(base_url=base, headers=AUTH, timeout=30) as http,
        ):
            yield client, http
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()


async def test_a_response_outlives_its_daemon(tmp_path: Path) -> None:
    write_swarm(tmp_path)
    async with served(tmp_path) as (client, _):
        first = await client.responses.create(
            model="beta", input="remember the milk", user="kitchen", metadata={"n": "1"}
        )
    async with served(tmp_path) as (client, http):  # a new daemon on the same state
        found = await client.responses.retrieve(first.id)
        assert found.status == "completed"
        assert found.output_text == "beta got: remember the milk"
        assert (found.metadata, found.user) == ({"n": "1"}, "kitchen")
        then = await client.responses.create(
            model="beta", input="what was it?", previous_response_id=first.id
        )
        assert then.output_text == "beta got: what was it?"
        conversation = await conversation_of(http, "beta", "kitchen")
    assert "remember the milk" in conversation
    assert "what was it?" in conversation
