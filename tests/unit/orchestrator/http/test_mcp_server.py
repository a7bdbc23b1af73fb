"""The MCP door's seams served in-process: what a call's arguments may be, and what ``/mcp``
answers before the SDK is reached (the extra missing, a body too big), and how a streamed
answer's head is sent."""

from __future__ import annotations

import os
import socket
import sys

import httpx2
import pytest
from starlette.types import Message

from orchestrator.callers import Peer, with_peer
from orchestrator.http.app import build_app
from orchestrator.http.body import MAX_BODY_BYTES, BadBody
from orchestrator.http.mcp_server import head_with_first_event
from orchestrator.http.mcp_tools import IDEMPOTENCY_META_KEY as KEY
from orchestrator.http.mcp_tools import Arguments, idempotency_key_of
from tests.support.fake_swarm import FakeSwarm

JSON = {"Content-Type": "application/json"}
OPERATOR = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
"""This process on ``api.sock``."""


def test_arguments_take_input_and_an_instance_key() -> None:
    assert Arguments.read({"input": "hi"}) == Arguments("hi", "default")
    assert Arguments.read({"input": "hi", "instanceKey": "k1"}) == Arguments("hi", "k1")


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        (None, "input", "input must be non-empty text"),
        ({}, "input", "input must be non-empty text"),
        ({"input": 7}, "input", "input must be a string"),
        ({"input": "  "}, "input", "input must be non-empty text"),
        ({"input": "hi", "instanceKey": 3}, "instanceKey", "instanceKey must be a string"),
        ({"input": "hi", "model": "x"}, "model", "unknown field 'model'"),
    ],
)
def test_bad_arguments_name_their_field(
    given: dict[str, object] | None, field: str, words: str
) -> None:
    with pytest.raises(BadBody, match=words) as raised:
        Arguments.read(given)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("meta", "key"),
    [(None, None), ({}, None), ({"progressToken": 1}, None), ({KEY: "order-1"}, "order-1")],
)
def test_an_idempotency_key_rides_in_meta(meta: dict[str, object] | None, key: str | None) -> None:
    assert idempotency_key_of(meta) == key


@pytest.mark.parametrize("bad", [7, "", "line\nbreak", "x" * 256])
def test_a_key_that_may_not_be_one_names_its_field(bad: object) -> None:
    with pytest.raises(BadBody) as raised:
        idempotency_key_of({KEY: bad})
    assert raised.value.field == f"_meta.{KEY}"


async def test_without_the_extra_mcp_answers_an_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if `mcp` were not installed
    app = with_peer(build_app(FakeSwarm()), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as http:
        answer = await http.post("/mcp", content=b"{}", headers=JSON)
        assert (await http.get("/healthz")).status_code == 200  # the rest is unchanged
    assert answer.status_code == 501
    assert "pip install 'goondan-py[mcp]'" in answer.json()["error"]["message"]


async def test_a_body_over_the_limit_is_refused_before_the_sdk_reads_it() -> None:
    app = with_peer(build_app(FakeSwarm()), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    big = b'{"jsonrpc": "2.0", "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as http:
        answer = await http.post("/mcp", content=big, headers=JSON)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


def start(content_type: bytes) -> Message:
    return {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}  # fmt: skip


async def test_a_streamed_answers_head_leaves_with_its_first_event() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    held = head_with_first_event(send)
    await held(start(b"text/event-stream"))
    assert sent == []  # not a write of its own
    first = {"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True}
    await held(first)
    await held({"type": "http.response.body", "body": b"", "more_body": False})
    assert [m["type"] for m in sent] == ["http.response.start", *["http.response.body"] * 2]
    assert sent[1] is first


async def test_a_json_answers_head_is_sent_as_it_comes() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await head_with_first_event(send)(start(b"application/json"))
    assert sent == [start(b"application/json")]
