"""Bodies checked at the API's door: each refusal names its field; what passes can be sent."""

from __future__ import annotations

import json

import pytest

from goondan.defaults import MAX_REQUEST_TIMEOUT_MS
from ipc import DelegateMessage, encode
from orchestrator.http.body import MAX_DEPTH, BadBody, ChatRequest, Fields, parse_object


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ('{"a": ' + nested(100_000) + "}", None, f"deeper than {MAX_DEPTH}"),
        ('{"a": ' + nested(MAX_DEPTH) + "}", "a" + "[0]" * (MAX_DEPTH - 1), "deeper"),
        ('{"input": "\\ud800x"}', "input", "lone surrogate (U+D800 at 0)"),
        ('{"a": {"b": ["ok", "x\\udfff"]}}', "a.b[1]", "lone surrogate (U+DFFF at 1)"),
        ('{"\\ud800": 1}', "\\ud800", "lone surrogate"),
        ('{"n": NaN}', "n", "finite"),
        ('{"n": [1, -Infinity]}', "n[1]", "finite"),
        ('{"n": 1e400}', "n", "finite"),
        ('{"n": 100000000000000000000}', "n", "64 bits"),
        ("[1]", None, "JSON object"),
        ("{not json", None, "not JSON"),
    ],
)
def test_what_cannot_cross_to_an_agent_is_refused_naming_where(
    body: str, field: str | None, says: str
) -> None:
    with pytest.raises(BadBody) as refused:
        parse_object(body.encode())
    assert refused.value.field == field
    assert says in refused.value.message
    json.dumps(refused.value.to_json()).encode()  # the answer itself is always sendable


def test_what_passes_crosses_the_wire() -> None:
    body = {
        "input": "héllo \U0001f600",  # a pair of surrogates in JSON is one character
        "n": [-(2**63), 2**64 - 1, 1.5],
        "deep": json.loads(nested(MAX_DEPTH - 1)),
    }
    text = json.dumps(body)  # ensure_ascii: the emoji travels as "\ud83d\ude00"
    assert "\\ud83d\\ude00" in text
    data = parse_object(text.encode())
    assert data == body
    encode(DelegateMessage(sender="a", to="b", correlation_id="c", payload=data))
    assert parse_object(b"") == {}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"input": "hi", "instancekey": "k"}, "instancekey"),
        ({"instanceKey": "k"}, "input"),
        ({"input": "  "}, "input"),
        ({"input": 3}, "input"),
        ({"input": "hi", "timeoutMs": 0}, "timeoutMs"),
        ({"input": "hi", "timeoutMs": MAX_REQUEST_TIMEOUT_MS + 1}, "timeoutMs"),
        ({"input": "hi", "timeoutMs": 1.5}, "timeoutMs"),
        ({"input": "hi", "timeoutMs": True}, "timeoutMs"),
        ({"input": "hi", "stream": "yes"}, "stream"),
        ({"input": "hi", "instanceKey": ["k"]}, "instanceKey"),
    ],
)
def test_a_routes_fields_are_read_by_type_and_bound(data: dict[str, object], field: str) -> None:
    with pytest.raises(BadBody) as refused:
        read_request(data)
    assert refused.value.field == field


def read_request(data: dict[str, object]) -> None:
    """Read ``data`` as the requests route does."""
    fields = Fields(data, ("input", "instanceKey", "timeoutMs", "stream"))
    fields.required_text("input")
    fields.instance_key()
    fields.timeout_ms()
    fields.flag("stream")


def test_good_fields_read_with_their_defaults() -> None:
    fields = Fields({"input": "hi", "timeoutMs": MAX_REQUEST_TIMEOUT_MS, "stream": None})
    assert fields.required_text("input") == "hi"
    assert fields.instance_key() == "default"
    assert fields.timeout_ms() == MAX_REQUEST_TIMEOUT_MS
    assert fields.flag("stream") is False


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"model": ["a"], "messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "a"}, "messages"),
        ({"model": "a", "messages": []}, "messages"),
        ({"model": "a", "messages": ["hi"]}, "messages[0]"),
        ({"model": "a", "messages": [{"content": "hi"}]}, "messages[0].role"),
        ({"model": "a", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        (
            {
                "model": "a",
                "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            },
            "messages[0].content[0].text",
        ),
        ({"model": "a", "messages": [{"role": "assistant", "content": "hi"}]}, "messages[0]"),
        ({"model": "a", "messages": [{"role": "user", "content": "hi"}], "user": 1}, "user"),
        (
            {"model": "a", "messages": [{"role": "user", "content": "hi"}], "stream": 1},
            "stream",
        ),
        (
            {
                "model": "a",
                "messages": [{"role": "user", "content": "hi"}],
                "stream_options": {"include_usage": "yes"},
            },
            "include_usage",
        ),
    ],
)
def test_a_chat_completion_names_its_bad_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(BadBody) as refused:
        ChatRequest.read(data)
    assert refused.value.field == field


def test_a_chat_completion_ignores_fields_it_has_no_use_for() -> None:
    chat = ChatRequest.read(
        {
            "model": "a",
            "temperature": 0.2,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert (chat.model, chat.text, chat.user, chat.stream, chat.include_usage) == (
        "a",
        "hi",
        None,
        True,
        True,
    )
