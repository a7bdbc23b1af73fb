"""The Responses door's pure mappings: the body read at the door, ids, the ``response``
object, tool calls as output items, and the order of the streamed events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ipc import IpcError
from ipc.delegation import DelegateAnswer
from orchestrator.http.body import BadBody
from orchestrator.http.responses_api import ResponseEvents
from orchestrator.http.responses_shapes import (
    ResponsesRequest,
    request_id_of,
    response_id,
    response_json,
    tool_items,
)
from orchestrator.requests import RequestRecord

REQUEST_ID = "req_" + "ab" * 16
OK = DelegateAnswer(
    "ok", output="the answer", turn={"tokenUsage": {"promptTokens": 3, "completionTokens": 4}}
)


def record(**echo: object) -> RequestRecord:
    return RequestRecord(
        request_id=REQUEST_ID,
        kind="responses",
        agent="beta",
        instance_key="default",
        input="hi",
        accepted_at=1_700_000_000.5,
        echo=dict(echo) or None,
    )


def read(**body: Any) -> ResponsesRequest:
    return ResponsesRequest.read({"model": "beta", **body})


def refused(**body: Any) -> str | None:
    with pytest.raises(BadBody) as bad:
        ResponsesRequest.read(body)
    return bad.value.field


def test_a_response_id_is_the_request_ids_random_part() -> None:
    assert response_id(REQUEST_ID) == "resp_" + "ab" * 16
    assert request_id_of(response_id(REQUEST_ID)) == REQUEST_ID
    assert request_id_of("resp_short") is None
    assert request_id_of("resp_" + "AB" * 16) is None  # not a shape we give out
    assert request_id_of("req_" + "ab" * 16) is None


def test_input_text_or_the_last_user_message_is_the_turns_input() -> None:
    assert read(input="hello").turn_input == "hello"
    items = [
        {"type": "message", "role": "system", "content": "Be kind."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "sec"},
                {"type": "input_text", "text": "ond"},
            ],
        },
    ]
    asked = read(input=items, instructions="Be brief.")
    assert asked.text == "second"
    assert asked.turn_input == "Be brief.\n\nBe kind.\n\nsecond"
    assert asked.echo()["instructions"] == "Be brief."


def test_the_options_are_read() -> None:
    asked = read(
        input="x",
        user="u1",
        previous_response_id="resp_1",
        metadata={"a": "b"},
        store=False,
        include=["goondan.tool_calls", "message.output_text.logprobs"],
        tools=[],
        temperature=0.2,
    )
    assert (asked.user, asked.previous_response_id, asked.metadata) == ("u1", "resp_1", {"a": "b"})
    assert (asked.store, asked.tool_calls, asked.stream, asked.background) == (
        False,
        True,
        False,
        False,
    )
    assert read(input="x").store is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": "x"}, "model"),
        ({"model": "beta"}, "input"),
        ({"model": "beta", "input": "  "}, "input"),
        ({"model": "beta", "input": []}, "input"),
        ({"model": "beta", "input": ["x"]}, "input[0]"),
        ({"model": "beta", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        (
            {"model": "beta", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        (
            {
                "model": "beta",
                "input": [{"role": "user", "content": "a"}, {"type": "function_call_output"}],
            },
            "input[1]",
        ),
        ({"model": "beta", "input": [{"type": ["message"]}]}, "input[0].type"),
        ({"model": "beta", "input": [{"role": {"user": 1}, "content": "x"}]}, "input[0].role"),
        (
            {"model": "beta", "input": [{"role": "user", "content": [{"type": []}]}]},
            "input[0].content[0].type",
        ),
        ({"model": "beta", "input": "x", "include": "all"}, "include"),
        ({"model": "beta", "input": "x", "store": "no"}, "store"),
        ({"model": "beta", "input": "x", "metadata": {"k" * 65: "v"}}, "metadata"),
        ({"model": "beta", "input": "x", "metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"model": "beta", "input": "x", "conversation": "conv_1"}, "conversation"),
        ({"model": "beta", "input": "x", "prompt": {"id": "p"}}, "prompt"),
        (
            {"model": "beta", "input": "x", "text": {"format": {"type": "json_schema"}}},
            "text.format",
        ),
        ({"model": "beta", "input": "x", "tools": {}}, "tools"),
        ({"model": "beta", "input": "x", "stream": True, "background": True}, "background"),
    ],
)
def test_a_bad_body_names_its_field(body: dict[str, Any], field: str) -> None:
    assert refused(**body) == field


def test_the_response_object_in_each_state() -> None:
    kept = record(instructions="Be brief.", previousResponseId="resp_0", metadata={"a": "b"})
    running = response_json(kept, None)
    assert (running["status"], running["output"], running["usage"]) == ("in_progress", [], None)
    assert running["id"] == response_id(REQUEST_ID)
    assert running["created_at"] == 1_700_000_000
    assert (running["previous_response_id"], running["instructions"]) == ("resp_0", "Be brief.")
    assert running["metadata"] == {"a": "b"}

    done = response_json(kept, OK)
    assert done["status"] == "completed"
    [message] = done["output"]
    assert message["type"] == "message"
    assert message["content"][0] == {
        "type": "output_text",
        "text": "the answer",
        "annotations": [],
        "logprobs": [],
    }
    assert done["usage"]["input_tokens"] == 3
    assert done["usage"]["output_tokens"] == 4
    assert done["usage"]["total_tokens"] == 7

    failure = DelegateAnswer.failure(IpcError("it broke", code="AGENT_CRASHED"))
    failed = response_json(record(), failure)
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "AGENT_CRASHED", "message": "it broke"}
    assert (failed["metadata"], failed["previous_response_id"]) == ({}, None)
    stopped = DelegateAnswer.failure(IpcError("stopped", code="CANCELLED"))
    assert response_json(record(), stopped)["status"] == "cancelled"


def test_tool_events_become_a_function_call_and_its_output() -> None:
    called = {"type": "tool.called", "toolCallId": "c1", "toolName": "fs__read", "args": {"p": "a"}}
    [call] = tool_items(called)
    assert call == {
        "id": "fc_c1",
        "type": "function_call",
        "call_id": "c1",
        "name": "fs__read",
        "arguments": '{"p": "a"}',
        "status": "completed",
    }
    [done] = tool_items({"type": "tool.completed", "toolCallId": "c1", "output": {"n": 1}})
    assert (done["type"], done["call_id"], json.loads(done["output"])) == (
        "function_call_output",
        "c1",
        {"n": 1},
    )
    error = {
        "type": "tool.completed",
        "toolCallId": "c2",
        "status": "error",
        "error": {"code": "E"},
    }
    assert json.loads(tool_items(error)[0]["output"]) == {"error": {"code": "E"}}
    failed = {"type": "tool.failed", "toolCallId": "c3", "errorMessage": "boom"}
    assert json.loads(tool_items(failed)[0]["output"]) == {"error": "boom"}
    assert tool_items({"type": "step.started"}) == []


def parsed(chunks: list[bytes], ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The bodies of server-sent events (their ``id:`` added to ``ids``)."""
    events = []
    for chunk in chunks:
        lines = chunk.decode().strip().split("\n")
        fields = dict(line.split(": ", 1) for line in lines)
        body = json.loads(fields["data"])
        assert fields["event"] == body["type"]
        if ids is not None:
            ids.append(fields.get("id", ""))
        events.append(body)
    return events


def test_the_streamed_events_open_a_message_per_step_and_close_it() -> None:
    events = ResponseEvents(record())
    chunks = events.start()
    chunks += events.delta("s1", "Let me ", 1)
    chunks += events.delta("s1", "look.", 2)
    called = {"type": "tool.called", "toolCallId": "c1", "toolName": "t"}
    chunks += events.items(tool_items(called), 3)
    chunks += events.delta("s2", "Found it.", 5)
    chunks += events.finish(OK)
    ids: list[str] = []
    bodies = parsed(chunks, ids)
    assert [b["sequence_number"] for b in bodies] == list(range(len(bodies)))
    assert [b["type"] for b in bodies] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert bodies[6]["text"] == "Let me look."
    # Each event's id is the feed number of the last piece it carries: a client that lost
    # the stream resumes the request's events after it.
    assert ids == [
        *["", ""],
        *["1", "1", "1", "2"],
        *["2", "2", "2"],
        *["3", "3", "3"],
        *["5", "5", "5", "5", "5", "5"],
        "answer",
    ]
    completed = bodies[-1]["response"]
    assert [item["type"] for item in completed["output"]] == ["message", "function_call", "message"]
    assert completed["output"][0]["id"] != completed["output"][2]["id"]
    assert completed["output"][2]["content"][0]["text"] == "Found it."


def test_a_turn_that_streamed_nothing_sends_its_answer_as_one_delta() -> None:
    events = ResponseEvents(record())
    bodies = parsed(events.start() + events.finish(OK))
    deltas = [b["delta"] for b in bodies if b["type"] == "response.output_text.delta"]
    assert deltas == ["the answer"]
    assert bodies[-1]["response"]["output"][0]["content"][0]["text"] == "the answer"


def test_a_failure_closes_the_open_message_then_fails_the_response() -> None:
    events = ResponseEvents(record())
    chunks = events.start() + events.delta("s1", "partial")
    failure = DelegateAnswer.failure(IpcError("it broke", code="AGENT_CRASHED"))
    bodies = parsed(chunks + events.finish(failure))
    assert [b["type"] for b in bodies[-4:]] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    failed = bodies[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "AGENT_CRASHED"
    assert failed["output"][0]["content"][0]["text"] == "partial"


def test_deltas_lost_to_a_slow_client_leave_the_last_message_the_answers_text() -> None:
    events = ResponseEvents(record())
    chunks = events.start() + events.delta("s1", "the ans")  # "wer" was dropped
    bodies = parsed(chunks + events.finish(OK, dropped=1))
    assert bodies[-4]["text"] == "the answer"
    assert bodies[-1]["response"]["output"][0]["content"][0]["text"] == "the answer"
