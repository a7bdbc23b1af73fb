"""The AG-UI door's reading of what a front end sends: ``Accept``, a ``RunAgentInput`` (the
Turn's input, the field a bad one names) and the answer to an interrupt."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import Context, ResumeEntry, RunAgentInput

from orchestrator.http.ag_ui import (
    CANCELLED_REASON,
    REJECTED_REASON,
    accepts_event_stream,
    decision_of,
    read_input,
    turn_input,
)
from orchestrator.http.body import BadBody


@pytest.mark.parametrize(
    ("accept", "taken"),
    [
        (None, True),
        ("", True),
        ("text/event-stream", True),
        ("application/json, text/event-stream;q=0.5", True),
        ("*/*", True),
        ("text/*", True),
        ("application/json", False),
        ("application/vnd.ag-ui.event+proto", False),
        ("text/event-stream;q=0", False),
        ("text/event-stream;q=0.0, */*;q=0", False),
        ("text/event-stream;q=nope", False),
    ],
)
def test_accept(accept: str | None, taken: bool) -> None:
    assert accepts_event_stream(accept) is taken


def run(**body: Any) -> RunAgentInput:
    return read_input(RunAgentInput, {"threadId": "t", "runId": "r", **body})


def field_of(**body: Any) -> str | None:
    with pytest.raises(BadBody) as refused:
        turn_input(run(**body))
    return refused.value.field


def test_the_last_user_message_is_the_input() -> None:
    messages = [
        {"id": "1", "role": "user", "content": "first"},
        {"id": "2", "role": "assistant", "content": "reply"},
        {"id": "3", "role": "user", "content": [{"type": "text", "text": "second"}]},
        {"id": "4", "role": "assistant", "content": "thinking"},
    ]
    assert turn_input(run(messages=messages)) == "second"


def test_context_is_added_after_the_input() -> None:
    context = [Context(description="page", value="/settings"), Context(description="u", value="v")]
    body = run(messages=[{"id": "1", "role": "user", "content": "hi"}])
    body.context = context
    assert turn_input(body) == "hi\n\npage: /settings\nu: v"


def test_a_run_without_user_text_names_the_message() -> None:
    assert field_of(messages=[]) == "messages"
    assert (
        field_of(messages=[{"id": "1", "role": "user", "content": "  "}]) == "messages[0].content"
    )
    image = {"type": "image", "source": {"type": "url", "value": "https://example.org/a.png"}}
    assert field_of(messages=[{"id": "1", "role": "user", "content": [image]}]) == (
        "messages[0].content"
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"runId": "r", "messages": []}, "threadId"),
        ({"threadId": "t", "messages": []}, "runId"),
        ({"threadId": "t", "runId": "", "messages": []}, "runId"),
        ({"threadId": "t", "runId": "r", "messages": [{"id": "1", "role": "x"}]}, "messages[0]"),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "1", "role": "user", "content": 5}],
            },
            "messages[0].content",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [], "context": [{}]},
            "context[0].description",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "a"}]},
            "resume[0].status",
        ),
    ],
)
def test_a_bad_input_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(BadBody) as refused:
        read_input(RunAgentInput, body)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("entry", "decision"),
    [
        (
            ResumeEntry(interrupt_id="a", status="cancelled"),
            ("reject", {"reason": CANCELLED_REASON}),
        ),
        (
            ResumeEntry(interrupt_id="a", status="resolved", payload={"approved": True}),
            ("approve", {}),
        ),
        (
            ResumeEntry(
                interrupt_id="a",
                status="resolved",
                payload={"approved": True, "arguments": {"x": 1}},
            ),
            ("approve", {"arguments": {"x": 1}}),
        ),
        (
            ResumeEntry(interrupt_id="a", status="resolved", payload={"approved": False}),
            ("reject", {"reason": REJECTED_REASON}),
        ),
        (
            ResumeEntry(
                interrupt_id="a", status="resolved", payload={"approved": False, "reason": "no"}
            ),
            ("reject", {"reason": "no"}),
        ),
    ],
)
def test_a_resume_entry_is_an_operators_decision(
    entry: ResumeEntry, decision: tuple[str, dict[str, Any]]
) -> None:
    assert decision_of(entry, "resume[0]") == decision


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (None, "resume[0].payload"),
        (True, "resume[0].payload"),
        ({"approved": "yes"}, "resume[0].payload"),
        ({"approved": True, "args": {}}, "resume[0].payload.args"),
    ],
)
def test_a_bad_answer_names_the_payload(payload: object, field: str) -> None:
    entry = ResumeEntry(interrupt_id="a", status="resolved", payload=payload)
    with pytest.raises(BadBody) as refused:
        decision_of(entry, "resume[0]")
    assert refused.value.field == field
