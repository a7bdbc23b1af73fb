"""Accepted requests over the HTTP API, in-process: ids, ``Idempotency-Key``, ``GET
/v1/requests/{id}`` and resumable streams, against a swarm whose Turns the test ends, and a
request store in a temporary state directory."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from orchestrator.callers import Peer, with_peer
from orchestrator.http.app import build_app
from orchestrator.operations.protocol import DeltaSink
from orchestrator.requests import RequestDesk, RequestStore
from tests.support.fake_swarm import FakeSwarm

JSON = {"Content-Type": "application/json"}
OPERATOR = Peer(socket.AF_UNIX, pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
BODY = {"input": "hello", "instanceKey": "k1"}


@dataclass
class GatedSwarm(FakeSwarm):
    """A fake swarm whose Turns stream their ``deltas``, then wait for :attr:`gate`."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    seen_on_disk: list[bool] = field(default_factory=list)
    """Per Turn: whether its request's record was on disk when the Turn started."""
    directory: Path | None = None

    async def request(  # type: ignore[override]
        self, text: str, *, on_delta: DeltaSink | None = None, **options: Any
    ) -> DelegateAnswer:
        request_id = options.get("request_id", "")
        if self.directory is not None:
            journal = b"".join(p.read_bytes() for p in self.directory.glob("journal-*.jsonl"))
            self.seen_on_disk.append(f'"requestId":"{request_id}"'.encode() in journal)
        self.asked.append({"text": text, "requestId": request_id})
        if on_delta is not None:
            for n, piece in enumerate(self.deltas):
                on_delta("alpha", TextDelta("c", piece, "t", "k1", "turn-1", f"s{n}"))
        self.started.set()
        await self.gate.wait()
        return self.answer


@pytest.fixture
async def setup(
    tmp_path: Path,
) -> AsyncIterator[tuple[httpx2.AsyncClient, GatedSwarm, RequestDesk]]:
    swarm = GatedSwarm(answer=DelegateAnswer("ok", "done", {"traceId": "t-9"}))
    swarm.directory = tmp_path / "requests"
    desk = RequestDesk(swarm, RequestStore(swarm.directory))
    assert await desk.open() == []
    app = with_peer(build_app(swarm, desk=desk), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as client:
        yield client, swarm, desk
    swarm.gate.set()
    await desk.close()


async def post(
    client: httpx2.AsyncClient, body: object = BODY, key: str | None = None, **headers: str
) -> httpx2.Response:
    sent = {**JSON, **headers}
    if key is not None:
        sent["Idempotency-Key"] = key
    return await client.post("/v1/agents/alpha/requests", content=json.dumps(body), headers=sent)


async def test_every_request_has_an_id_in_its_header_and_answer(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    first, second = await post(client), await post(client)
    ids = [r.headers["x-goondan-request-id"] for r in (first, second)]
    assert ids[0] != ids[1]
    assert [r.json()["requestId"] for r in (first, second)] == ids
    assert [a["requestId"] for a in swarm.asked] == ids  # the router gets the same id
    assert swarm.seen_on_disk == [True, True]  # recorded before the Turn started
    assert "idempotent-replayed" not in first.headers


async def test_a_key_reused_with_the_same_body_runs_one_turn(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    first = await post(client, key="order-1")
    again = await post(client, key="order-1")
    assert len(swarm.asked) == 1
    assert again.status_code == 200
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["x-goondan-request-id"] == first.headers["x-goondan-request-id"]
    other = await post(client, key="order-2")  # another key: another Turn
    assert len(swarm.asked) == 2
    assert other.json()["requestId"] != first.json()["requestId"]


async def test_a_retry_while_the_first_runs_waits_for_the_same_answer(setup: Any) -> None:
    client, swarm, _ = setup
    first = asyncio.create_task(post(client, key="slow"))
    async with asyncio.timeout(5):
        await swarm.started.wait()
    second = asyncio.create_task(post(client, key="slow"))
    await asyncio.sleep(0)  # let the retry reach the desk before the Turn ends
    swarm.gate.set()
    async with asyncio.timeout(5):
        answers = await asyncio.gather(first, second)
    assert len(swarm.asked) == 1
    assert answers[0].content == answers[1].content
    assert answers[1].headers["idempotent-replayed"] == "true"


async def test_a_key_reused_with_another_body_is_refused(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    await post(client, key="k")
    for body in ({"input": "other"}, {**BODY, "instanceKey": "k2"}, {**BODY, "stream": True}):
        refused = await post(client, body, key="k")
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    sent = await client.post(
        "/v1/agents/alpha/sends", json=BODY, headers={"Idempotency-Key": "k"}
    )  # another front door is another body too
    assert sent.status_code == 422
    assert len(swarm.asked) == 1


@pytest.mark.parametrize(
    "key", ["", " ", " a", "x" * 256, "a\x01b", "tab\there", "del\x7f", "caf\xe9", '""', '" "']
)
async def test_a_bad_key_is_refused_naming_the_header(setup: Any, key: str) -> None:
    client, swarm, _ = setup
    raw = [(b"content-type", b"application/json"), (b"idempotency-key", key.encode("latin-1"))]
    refused = await client.post("/v1/agents/alpha/requests", content=json.dumps(BODY), headers=raw)
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "Idempotency-Key"
    assert swarm.asked == []


async def test_the_longest_key_and_a_quoted_one_are_taken(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    assert (await post(client, key="~" * 255)).status_code == 200
    plain, quoted = await post(client, key="abc"), await post(client, key='"abc"')
    assert quoted.headers["idempotent-replayed"] == "true"
    assert quoted.json()["requestId"] == plain.json()["requestId"]


async def test_two_key_headers_are_refused(setup: Any) -> None:
    client, swarm, _ = setup
    raw = [(b"content-type", b"application/json"), (b"idempotency-key", b"a")]
    raw.append((b"idempotency-key", b"b"))
    refused = await client.post("/v1/agents/alpha/requests", content=json.dumps(BODY), headers=raw)
    assert refused.status_code == 400
    assert swarm.asked == []


async def test_a_request_is_found_by_its_id_running_then_done(setup: Any) -> None:
    client, swarm, desk = setup
    posted = asyncio.create_task(post(client))
    async with asyncio.timeout(5):
        await swarm.started.wait()
    (request_id,) = desk.running
    running = await client.get(f"/v1/requests/{request_id}")
    assert running.json() == {"requestId": request_id, "state": "running"}
    waiting = asyncio.create_task(client.get(f"/v1/requests/{request_id}?wait=1e12"))
    await asyncio.sleep(0)
    swarm.gate.set()
    async with asyncio.timeout(5):
        done, answer = await waiting, await posted
    assert done.json() == {"requestId": request_id, "state": "done", "answer": answer.json()}
    later = await client.get(f"/v1/requests/{request_id}")  # from the store now
    assert later.json()["answer"] == answer.json()


@pytest.mark.parametrize("wait", ["abc", "-1", "nan", "-inf", "1e", "0x10"])
async def test_a_wait_that_is_no_number_of_seconds_is_refused(setup: Any, wait: str) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    request_id = (await post(client)).json()["requestId"]
    refused = await client.get(f"/v1/requests/{request_id}?wait={wait}")
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "wait"


async def test_an_unknown_or_guessed_id_is_not_found(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    real = (await post(client)).json()["requestId"]
    near = real[:-1] + ("0" if real[-1] != "0" else "1")
    for guess in (near, "req_" + "0" * 32, "req_..", "nothing"):
        missing = await client.get(f"/v1/requests/{guess}")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "REQUEST_NOT_FOUND"
        assert (await client.get(f"/v1/requests/{guess}/events")).status_code == 404
    escaping = await client.get("/v1/requests/..%2F..%2Fsecret")
    assert escaping.status_code == 404


async def test_a_send_is_recorded_and_answered_by_id(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    sent = await client.post("/v1/agents/alpha/sends", json=BODY, headers={"Idempotency-Key": "s"})
    again = await client.post("/v1/agents/alpha/sends", json=BODY, headers={"Idempotency-Key": "s"})
    assert sent.status_code == again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    request_id = sent.json()["requestId"]
    done = await client.get(f"/v1/requests/{request_id}?wait=5")
    assert done.json()["answer"]["output"] == "done"
    assert len(swarm.asked) == 1


async def test_a_chat_completion_with_a_key_runs_once(setup: Any) -> None:
    client, swarm, _ = setup
    swarm.gate.set()
    chat = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Idempotency-Key": "c1"}
    first = await client.post("/v1/chat/completions", json=chat, headers=headers)
    again = await client.post("/v1/chat/completions", json=chat, headers=headers)
    assert first.json()["choices"] == again.json()["choices"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(swarm.asked) == 1
    other = {**chat, "messages": [{"role": "user", "content": "else"}]}
    refused = await client.post("/v1/chat/completions", json=other, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    bad = await client.post("/v1/chat/completions", json=chat, headers={"Idempotency-Key": ""})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "Idempotency-Key"
    by_id = await client.get(f"/v1/requests/{first.json()['requestId']}")
    assert by_id.json()["answer"]["object"] == "chat.completion"


def events_of(body: bytes) -> list[tuple[str, str]]:
    """``(id, event)`` of each server-sent event in ``body``."""
    found = []
    for block in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines.get("id", ""), lines["event"]))
    return found


async def test_a_stream_resumes_after_its_last_event(setup: Any) -> None:
    client, swarm, desk = setup
    swarm.deltas = ["a", "b", "c"]
    streamed = asyncio.create_task(post(client, {**BODY, "stream": True}))
    async with asyncio.timeout(5):
        await swarm.started.wait()
    (request_id,) = desk.running
    path = f"/v1/requests/{request_id}/events"
    resumed = asyncio.create_task(client.get(path, headers={"Last-Event-ID": "1"}))
    garbage = asyncio.create_task(client.get(path, headers={"Last-Event-ID": "x\x01;9" * 9}))
    huge = asyncio.create_task(client.get(path, headers={"Last-Event-ID": "9" * 40}))
    await asyncio.sleep(0)
    swarm.gate.set()
    async with asyncio.timeout(5):
        whole, after, all_again, too_big = await asyncio.gather(streamed, resumed, garbage, huge)
    assert whole.headers["x-goondan-request-id"] == request_id
    expected = [("1", "delta"), ("2", "delta"), ("3", "delta"), ("answer", "answer")]
    assert events_of(whole.content) == expected
    assert events_of(after.content) == expected[1:]
    assert events_of(all_again.content) == expected  # not an id of ours: from the start
    assert events_of(too_big.content) == expected
    done = await client.get(path, headers={"Last-Event-ID": "2"})  # answered: the answer
    assert events_of(done.content) == [("answer", "answer")]
    assert json.loads(done.text.split("data: ", 1)[1])["requestId"] == request_id
    finished = await client.get(path, headers={"Last-Event-ID": "answer"})
    assert finished.status_code == 204  # EventSource stops reconnecting


async def test_a_flood_of_keys_is_bounded_and_refused_once_all_run(tmp_path: Path) -> None:
    swarm = GatedSwarm()
    desk = RequestDesk(swarm, RequestStore(tmp_path / "requests", capacity=3))
    await desk.open()
    app = with_peer(build_app(swarm, desk=desk), OPERATOR)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://goondan") as client:
        sent = [
            await client.post(
                "/v1/agents/alpha/sends", json=BODY, headers={"Idempotency-Key": f"flood-{n}"}
            )
            for n in range(4)
        ]
        assert [r.status_code for r in sent] == [202, 202, 202, 503]
        assert sent[-1].json()["error"]["code"] == "SERVER_BUSY"
        swarm.gate.set()  # the three finish: their answers may now make room
        for response in sent[:3]:
            request_id = response.json()["requestId"]
            done = await client.get(f"/v1/requests/{request_id}?wait=5")
            assert done.json()["state"] == "done"
        more = await client.post(
            "/v1/agents/alpha/sends", json=BODY, headers={"Idempotency-Key": "flood-9"}
        )
        assert more.status_code == 202
    await desk.close()
    on_disk = RequestStore(tmp_path / "requests", capacity=3)
    on_disk.load()
    assert len(on_disk) == 3


async def test_cancel_takes_an_accepted_requests_id(setup: Any) -> None:
    client, swarm, desk = setup
    posted = asyncio.create_task(post(client))
    async with asyncio.timeout(5):
        await swarm.started.wait()
    (request_id,) = desk.running
    trace_id = desk.trace_of(request_id)
    swarm.running = {trace_id: [trace_id]}
    cancelled = await client.post(f"/v1/requests/{request_id}/cancel", json={})
    assert cancelled.json()["cancelled"] == [trace_id]
    swarm.gate.set()
    async with asyncio.timeout(5):
        await posted
