"""The HTTP API of a real daemon, called with a real HTTP client over its Unix socket and TCP."""

from __future__ import annotations

import asyncio
import json
import queue
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.http.app import ApiRefused
from orchestrator.status import ProcessStatus
from tests.support.daemon import Daemon, run_cli
from tests.support.swarm import running_swarm, write_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def swarm(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(tmp_path) as orchestrator:
        yield orchestrator


@pytest.fixture
async def client(swarm: Orchestrator) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.AsyncHTTPTransport(uds=str(swarm.state_dir / "api.sock"))
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://goondan", timeout=30
    ) as http:
        yield http


JSON = {"Content-Type": "application/json"}
"""What every POST and DELETE says, a body or not."""


def error_code(response: httpx2.Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    return str(body["error"]["code"])


async def test_the_socket_is_private_to_the_daemons_user(swarm: Orchestrator) -> None:
    mode = (swarm.state_dir / "api.sock").stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


async def test_health_readiness_and_status(client: httpx2.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["ok"] is True
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()["entryAgent"]) == (200, "alpha")
    rows = {r["agent"]: r for r in (await client.get("/v1/agents")).json()["agents"]}
    assert rows["alpha"]["status"] == "idle"
    assert rows["beta"]["status"] == "notStarted"  # started on first use


async def test_a_request_answers_with_the_turns_answer(client: httpx2.AsyncClient) -> None:
    answer = await client.post("/v1/agents/alpha/requests", json={"input": "ask beta hello"})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["status"], body["output"]) == ("ok", "beta got: hello")
    assert len(body["turn"]["traceId"]) == 32


async def test_a_failed_request_is_a_502_with_the_structured_error(
    client: httpx2.AsyncClient,
) -> None:
    answer = await client.post("/v1/agents/beta/requests", json={"input": "crash"})
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "AGENT_CRASHED"


async def test_a_send_is_accepted_and_runs_without_anyone_waiting(
    client: httpx2.AsyncClient, swarm: Orchestrator
) -> None:
    sent = await client.post(
        "/v1/agents/beta/sends", json={"input": "remember the milk", "instanceKey": "notes"}
    )
    assert sent.status_code == 202
    request_id = sent.headers["x-goondan-request-id"]
    assert sent.json() == {
        "accepted": True,
        "agent": "beta",
        "instanceKey": "notes",
        "requestId": request_id,
    }
    answered = await client.get(f"/v1/requests/{request_id}?wait=30")
    assert answered.json()["state"] == "done"
    assert answered.json()["answer"]["status"] == "ok"
    async with asyncio.timeout(30):
        while True:
            listed = (await client.get("/v1/instances", params={"agent": "beta"})).json()
            if any(row["instanceKey"] == "notes" for row in listed["instances"]):
                break
            await asyncio.sleep(0.05)  # polling the public API, as a client would


async def test_instances_are_listed_and_deleted(client: httpx2.AsyncClient) -> None:
    body = {"input": "hello", "instanceKey": "k1"}
    assert (await client.post("/v1/agents/beta/requests", json=body)).status_code == 200
    listed = (await client.get("/v1/instances", params={"agent": "beta"})).json()["instances"]
    assert [row["instanceKey"] for row in listed] == ["k1"]
    deleted = await client.delete("/v1/agents/beta/instances/k1", headers=JSON)
    assert (deleted.status_code, deleted.json()) == (200, {"ok": True, "deleted": True})
    again = await client.delete("/v1/agents/beta/instances/k1", headers=JSON)
    assert again.json() == {"ok": True, "deleted": False}


async def test_a_restart_starts_a_new_process(
    client: httpx2.AsyncClient, swarm: Orchestrator
) -> None:
    before = swarm.supervisor.handle("alpha").pid
    restarted = await client.post("/v1/agents/alpha/restart", headers=JSON)
    assert restarted.status_code == 200
    assert restarted.json()["pid"] not in (None, before)


async def test_a_tcp_listener_requires_its_token(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path),
        state_dir=tmp_path / "state",
        api_listen="127.0.0.1:0",
        api_token="s3cret-token",
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        assert orchestrator.api is not None
        assert orchestrator.api.port
        base = f"http://127.0.0.1:{orchestrator.api.port}"
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            refused = await http.get("/healthz")
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"] == "Bearer"
            assert error_code(refused) == "UNAUTHORIZED"
            wrong = await http.get("/healthz", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            auth = {"Authorization": "Bearer s3cret-token"}
            answer = await http.post(
                "/v1/agents/alpha/requests", json={"input": "hi"}, headers=auth
            )
            assert (answer.status_code, answer.json()["output"]) == (200, "alpha got: hi")
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()
    assert not (tmp_path / "state" / "api.sock").exists()


async def test_a_public_listener_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path), state_dir=tmp_path / "state", api_listen="0.0.0.0:0"
    )
    try:
        with pytest.raises(ApiRefused, match="without a token"):
            await orchestrator.start()
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()


def with_api_policy(path: Path, policy: str) -> Path:
    """The test swarm's goondan.yaml with ``policy.api`` set to ``policy`` (YAML flow)."""
    text = path.read_text()
    path.write_text(text.replace("  policy:\n", f"  policy:\n    api: {policy}\n", 1))
    return path


async def test_the_swarm_policy_names_the_listener_and_where_its_token_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_API_TOKEN", "from-the-environment")
    policy = "{listen: '127.0.0.1:0', tokenFrom: {env: SWARM_API_TOKEN}}"
    orchestrator = Orchestrator.from_bundle(
        with_api_policy(write_swarm(tmp_path), policy), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        assert orchestrator.api is not None
        assert orchestrator.api.port
        base = f"http://127.0.0.1:{orchestrator.api.port}"
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.get("/healthz")).status_code == 401
            auth = {"Authorization": "Bearer from-the-environment"}
            assert (await http.get("/healthz", headers=auth)).status_code == 200
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()


def test_a_token_variable_that_is_not_set_stops_the_start(tmp_path: Path) -> None:
    policy = "{listen: '0.0.0.0:0', tokenFrom: {env: UNSET_SWARM_TOKEN}}"
    with_api_policy(write_swarm(tmp_path), policy)
    done = run_cli("run", "goondan.yaml", cwd=tmp_path)
    assert done.returncode == 6  # a credential missing
    assert "UNSET_SWARM_TOKEN is not set" in done.stderr
    assert not (tmp_path / ".goondan" / "api.sock").exists()


@pytest.fixture
async def tcp_swarm(tmp_path: Path) -> AsyncIterator[tuple[Orchestrator, str]]:
    orchestrator = Orchestrator.from_bundle(
        write_swarm(tmp_path),
        state_dir=tmp_path / "state",
        api_listen="127.0.0.1:0",
        api_token="sk-swarm",
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        assert orchestrator.api is not None
        yield orchestrator, f"http://127.0.0.1:{orchestrator.api.port}/v1"
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()


async def test_the_openai_sdk_talks_to_the_swarm(tcp_swarm: tuple[Orchestrator, str]) -> None:
    import openai

    orchestrator, base_url = tcp_swarm
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-swarm", max_retries=0)
    models = await client.models.list()
    assert {m.id for m in models.data} == {"alpha", "beta"}
    completion = await client.chat.completions.create(
        model="beta",
        messages=[
            {"role": "system", "content": "ignored: the agent has its own prompt"},
            {"role": "user", "content": "hello"},
        ],
        user="k-openai",
    )
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "beta got: hello"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    keys = [p.name for p in (orchestrator.state_dir / "agents" / "beta" / "instances").iterdir()]
    assert "k-openai" in keys  # `user` chose the instance
    entry = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    )
    assert entry.choices[0].message.content == "alpha got: hi"  # the swarm's name: entry agent
    stream = await client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "ask beta hi"}], stream=True
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "beta got: hi"
    assert chunks[-1].choices[0].finish_reason == "stop"
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(
            model="nobody", messages=[{"role": "user", "content": "hi"}]
        )
    async with openai.AsyncOpenAI(base_url=base_url, api_key="wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError):
            await wrong.models.list()
    with pytest.raises(openai.APIStatusError) as failed:
        await client.chat.completions.create(
            model="beta", messages=[{"role": "user", "content": "crash"}]
        )
    assert failed.value.status_code == 502
    await client.close()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus exposition (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return 0.0


async def test_metrics_count_requests_turns_tools_and_crashes(
    client: httpx2.AsyncClient,
) -> None:
    before = (await client.get("/metrics")).text
    assert sample(before, "goondan_agent_up", agent="alpha") == 1.0
    assert sample(before, "goondan_turns_total", agent="beta", status="ok") == 0.0
    ok = await client.post("/v1/agents/alpha/requests", json={"input": "ask beta hello"})
    assert ok.status_code == 200
    crashed = await client.post("/v1/agents/beta/requests", json={"input": "crash"})
    assert crashed.status_code == 502
    scraped = await client.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    text = scraped.text
    assert sample(text, "goondan_turns_total", agent="beta", status="ok") == 1.0
    assert sample(text, "goondan_turns_total", agent="alpha", status="ok") == 1.0
    assert sample(text, "goondan_tool_calls_total", agent="alpha", tool="agents__request") == 1.0
    assert sample(text, "goondan_agent_crashes_total", agent="beta") == 1.0
    route = "/v1/agents/{agent}/requests"
    assert sample(text, "goondan_http_requests_total", route=route, status="200") == 1.0
    assert sample(text, "goondan_http_requests_total", route=route, status="502") == 1.0
    assert sample(text, "goondan_http_request_seconds_count", route=route) == 2.0
    assert sample(text, "goondan_pending_requests", agent="beta") == 0.0


async def sse_events(response: httpx2.Response) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` pairs of a server-sent event stream, as they arrive."""
    kind, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif line == "" and data:
            yield kind, data
            kind, data = "message", ""


async def test_the_event_stream_pushes_events_as_they_happen(
    client: httpx2.AsyncClient, swarm: Orchestrator, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    async with client.stream("GET", "/v1/events", params={"agent": "beta"}) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        request = asyncio.ensure_future(
            client.post("/v1/agents/alpha/requests", json={"input": f"ask beta hold {gate}"})
        )
        seen: list[str] = []
        async with asyncio.timeout(30):
            async for kind, data in sse_events(stream):
                event = json.loads(data)
                assert event["agentName"] == "beta"  # the filter holds
                seen.append(kind)
                if kind == "tool.called" and event["toolName"] == "fault__hold":
                    assert not request.done()  # pushed while the Turn still runs
                    gate.touch()
                if kind == "turn.completed":
                    break
        assert "process.spawned" in seen  # beta started on first use: lifecycle events too
        assert next(k for k in seen if not k.startswith("process.")) == "turn.started"
        assert seen.index("tool.called") < seen.index("tool.completed")
        answer = await asyncio.wait_for(request, 30)
    assert answer.json()["output"] == "released"


async def test_an_event_stream_ends_when_the_daemon_stops(tmp_path: Path) -> None:
    async with running_swarm(tmp_path) as orchestrator:
        transport = httpx2.AsyncHTTPTransport(uds=str(orchestrator.state_dir / "api.sock"))
        http = httpx2.AsyncClient(transport=transport, base_url="http://goondan", timeout=30)
        stream_cm = http.stream("GET", "/v1/events")
        stream = await stream_cm.__aenter__()
        lines = stream.aiter_lines()
        assert await anext(lines) == ": connected"
        stopping = asyncio.ensure_future(orchestrator.shutdown())
        async with asyncio.timeout(10):  # well inside the server's own grace period
            async for _ in lines:
                pass
        await asyncio.wait_for(stopping, 60)
        await stream_cm.__aexit__(None, None, None)
        await http.aclose()


def test_logs_follow_is_pushed_by_the_daemon_and_shows_each_event_once(tmp_path: Path) -> None:
    """``logs -f`` prints the history, then what the daemon pushes as it happens; once the
    daemon stops it tails the file for whatever runs next."""
    daemon = Daemon(tmp_path)
    follow = None
    reader: threading.Thread | None = None
    try:
        daemon.wait_for("http api listening")
        daemon.wait_for("agent ready")
        first = run_cli("send", "beta", "before", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        follow = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "logs", "goondan.yaml", "-f", "--json"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert follow.stdout is not None
        output: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(
            target=lambda: [output.put(line) for line in follow.stdout], daemon=True
        )
        reader.start()
        lines: list[dict[str, object]] = []

        def read_until(turns_completed: int) -> None:
            deadline = time.monotonic() + 30
            while sum(1 for e in lines if e.get("type") == "turn.completed") < turns_completed:
                lines.append(json.loads(output.get(timeout=max(deadline - time.monotonic(), 0))))

        # the history first ...
        read_until(1)
        second = run_cli("send", "beta", "after", cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        # ... then the new Turn, pushed: a file tail would also show it, but only once more
        read_until(2)
        turns = [e for e in lines if e.get("type") == "turn.started"]
        assert len(turns) == len({json.dumps(e, sort_keys=True) for e in turns})
        assert follow.poll() is None  # still following
    finally:
        if follow is not None:
            follow.kill()
            follow.wait()
            if reader is not None:
                reader.join(10)  # it ends at the pipe's end of file
            for pipe in (follow.stdout, follow.stderr):
                if pipe is not None:
                    pipe.close()
        daemon.stop()


# -- streaming -------------------------------------------------------------------------------------


async def test_the_openai_sdk_receives_the_answer_in_deltas_as_produced(
    tcp_swarm: tuple[Orchestrator, str],
) -> None:
    import openai

    _, base_url = tcp_swarm
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-swarm", max_retries=0) as client:
        ask = [{"role": "user", "content": "ask beta three little words"}]
        whole = await client.chat.completions.create(model="alpha", messages=ask, user="whole")
        stream = await client.chat.completions.create(
            model="alpha",
            messages=ask,
            user="streamed",
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 1  # word by word, as the scripted model streams
    assert "".join(pieces) == whole.choices[0].message.content == "beta got: three little words"
    marks = [(c.model_extra or {}).get("goondan") for c in chunks if c.choices]
    assert {m["agent"] for m in marks if m} == {"alpha"}  # no relay asked: alpha's own text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
    assert len({c.id for c in chunks}) == 1


async def test_a_turn_failing_mid_stream_ends_the_stream_with_its_error(
    tcp_swarm: tuple[Orchestrator, str],
) -> None:
    import openai

    _, base_url = tcp_swarm
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-swarm", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="beta",
            messages=[{"role": "user", "content": "say famous last words then crash"}],
            stream=True,
        )
        pieces: list[str] = []

        async def read() -> None:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)

        with pytest.raises(openai.APIError, match="exited before answering"):
            await read()
    assert "".join(pieces) == "famous last words"  # what was said before the crash stays said


async def stream_request(
    client: httpx2.AsyncClient, agent: str, body: dict[str, object]
) -> list[tuple[str, dict[str, object]]]:
    """The server-sent events of a streamed native request, in order."""
    async with client.stream("POST", f"/v1/agents/{agent}/requests", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [(kind, json.loads(data)) async for kind, data in sse_events(response)]


@pytest.mark.parametrize("relay", [True, False])
async def test_a_delegated_agents_text_is_relayed_only_when_asked(
    client: httpx2.AsyncClient, relay: bool
) -> None:
    body = {"input": "ask beta hello world", "stream": True, "relay": relay}
    events = await stream_request(client, "alpha", body)
    kind, answer = events[-1]
    assert (kind, answer["status"], answer["output"]) == ("answer", "ok", "beta got: hello world")
    deltas = [data for kind, data in events[:-1]]
    assert {kind for kind, _ in events[:-1]} == {"delta"}
    by_agent = [str(d["agent"]) for d in deltas]
    alpha_text = "".join(str(d["text"]) for d in deltas if d["agent"] == "alpha")
    assert alpha_text == answer["output"]
    if relay:  # beta's text first (alpha waited for it), marked as beta's
        beta_text = "".join(str(d["text"]) for d in deltas if d["agent"] == "beta")
        assert beta_text == "beta got: hello world"
        assert by_agent.index("alpha") > max(i for i, a in enumerate(by_agent) if a == "beta")
    else:
        assert set(by_agent) == {"alpha"}
    assert {d["traceId"] for d in deltas} == {answer["turn"]["traceId"]}  # type: ignore[index]


async def test_the_event_stream_shows_text_while_the_turn_runs(
    client: httpx2.AsyncClient, swarm: Orchestrator, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    async with client.stream("GET", "/v1/events", params={"agent": "beta"}) as stream:
        request = asyncio.ensure_future(
            client.post(
                "/v1/agents/beta/requests",
                json={"input": f"say thinking it over then hold {gate}", "stream": True},
            )
        )
        texts: list[str] = []
        async with asyncio.timeout(30):
            async for kind, data in sse_events(stream):
                event = json.loads(data)
                if kind == "text.delta":
                    texts.append(event["text"])
                    assert event["agentName"] == "beta"
                    if not gate.exists():  # the Turn waits on the gate: pushed as produced
                        assert not request.done()
                    if "".join(texts) == "thinking it over":
                        gate.touch()
                if kind == "turn.completed":
                    break
        assert texts == ["thinking ", "it ", "over", "released"]
        answer = await asyncio.wait_for(request, 30)
    lines = [line for line in answer.text.splitlines() if line.startswith("event: ")]
    assert lines == ["event: delta"] * 4 + ["event: answer"]


async def test_a_client_leaving_mid_stream_leaves_the_turn_and_the_daemon_sound(
    client: httpx2.AsyncClient, swarm: Orchestrator, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    body = {"input": f"say wait for it then hold {gate}", "stream": True, "instanceKey": "gone"}
    async with client.stream("GET", "/v1/events", params={"agent": "beta"}) as events:
        async with client.stream("POST", "/v1/agents/beta/requests", json=body) as response:
            async with asyncio.timeout(30):
                first = await anext(sse_events(response))
            assert first[0] == "delta"
            assert len(swarm.router.streams) == 1
        gate.touch()  # the client is gone; the Turn goes on
        async with asyncio.timeout(30):
            async for kind, data in sse_events(events):
                if kind == "turn.completed" and json.loads(data)["instanceKey"] == "gone":
                    break
    # the instance's queue is serial: this answer comes after the abandoned Turn's
    after = await client.post(
        "/v1/agents/beta/requests", json={"input": "hi", "instanceKey": "gone"}
    )
    assert after.json()["output"] == "beta got: hi"
    assert swarm.router.streams == {}
    assert not swarm.router.pending


async def test_a_streamed_request_that_fails_before_any_text_is_a_502(
    client: httpx2.AsyncClient,
) -> None:
    answer = await client.post(
        "/v1/agents/beta/requests",
        json={"input": "crash"},
        headers={"Accept": "text/event-stream"},
    )
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "AGENT_CRASHED"
    bad = await client.post("/v1/agents/beta/requests", json={"input": "hi", "stream": "yes"})
    assert (bad.status_code, error_code(bad)) == (400, "BAD_REQUEST")


async def test_a_cancelled_request_is_answered_at_once_and_its_turns_stop_at_a_safe_point(
    swarm: Orchestrator, client: httpx2.AsyncClient, tmp_path: Path
) -> None:
    from agent_process.conversation import ConversationStore

    gate = tmp_path / "gate"  # beta's tool holds until this file exists
    asked = asyncio.create_task(
        client.post("/v1/agents/alpha/requests", json={"input": f"ask beta hold {gate}"})
    )
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.PROCESSING)
    rows = (await client.get("/v1/requests")).json()["requests"]
    outer = next(row for row in rows if row["caller"] == "user")
    inner = next(row for row in rows if row["caller"] == "alpha")
    assert (outer["agent"], inner["agent"]) == ("alpha", "beta")
    assert outer["traceId"] == inner["traceId"]  # one trace across the handoff

    async with swarm.live.subscribe() as subscription:
        cancelled = await client.post(
            f"/v1/requests/{outer['requestId']}/cancel", json={"reason": "wrong question"}
        )
        async with asyncio.timeout(30):  # beta heard it while its tool still holds
            while True:
                event = await subscription.queue.get()
                if event.get("type") == "turn.cancelling" and event.get("agentName") == "beta":
                    break
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["cancelled"] == [outer["traceId"]]
    async with asyncio.timeout(10):  # answered now, while beta's tool still holds
        answer = await asked
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "CANCELLED"
    assert "wrong question" in answer.json()["error"]["message"]
    assert not gate.exists()
    assert (await client.get("/v1/requests")).json()["requests"] == []

    gate.touch()  # the running tool finishes; beta stops before asking its model again
    async with asyncio.timeout(30):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        await swarm.supervisor.wait_for_status("alpha", ProcessStatus.IDLE)

    def messages(agent: str) -> list[Any]:
        root = swarm.state_dir / "agents" / agent / "instances" / "default" / "conversation"
        return ConversationStore(root).load()

    beta, alpha = messages("beta"), messages("alpha")
    assert [m.role for m in beta][-3:] == ["user", "assistant", "tool"]  # no reply after it
    assert [m.role for m in alpha][-3:] == ["user", "assistant", "tool"]
    alpha_result = alpha[-1].tool_result
    assert alpha_result is not None
    assert alpha_result["error"]["code"] == "CANCELLED"
    # The conversations are valid: both agents answer the next request as usual.
    again = await client.post("/v1/agents/alpha/requests", json={"input": "ask beta hi"})
    assert again.json()["output"] == "beta got: hi"


async def test_a_streamed_request_is_cancelled_by_the_trace_its_deltas_carry(
    client: httpx2.AsyncClient, swarm: Orchestrator, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    body = {"input": f"say almost done then hold {gate}", "stream": True}
    try:
        async with client.stream("POST", "/v1/agents/beta/requests", json=body) as response:
            events = sse_events(response)
            async with asyncio.timeout(30):
                kind, data = await anext(events)
                assert kind == "delta"
                trace = json.loads(data)["traceId"]
                cancelled = await client.post(f"/v1/requests/{trace}/cancel", headers=JSON)
                assert cancelled.json()["cancelled"] == [trace]
                rest = [(kind, json.loads(data)) async for kind, data in events]
        assert rest[-1][0] == "answer"
        assert rest[-1][1]["error"]["code"] == "CANCELLED"
    finally:
        gate.touch()
    assert swarm.router.streams == {}
