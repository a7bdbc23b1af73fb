"""What the studio reads: the event log (traces, spans, levels, handoffs, agents' last state,
tokens and cost, budgets reached and waits for model permits), conversations written by the
agents' own store with their instances' lasting usage, and the daemon's usage book."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from ipc.runtime_events import read_event
from orchestrator.studio import live
from orchestrator.studio.conversations import conversation, instances, read_messages
from orchestrator.studio.events import EventIndex, Trace, epoch_ms, event_key, event_level
from orchestrator.studio.server import Studio
from tests.support.studio_events import TRACE, event
from tools_base import Message, MessageEvent, ToolCall

# A handoff as the daemon logged it (ids shortened): coordinator → worker → file written.
HANDOFF = [
    event("turn.started", "27.815", "coordinator", "ct"),
    event("step.started", "27.816", "coordinator", "cs0", "ct", stepIndex=0),
    event("tool.called", "27.824", "coordinator", "ctool", "cs0", toolCallId="call_1",
          toolName="agents__request", args={"target": "worker", "input": "write notes.txt hi"}),
    event("turn.started", "27.843", "worker", "wt", "ctool"),
    event("step.started", "27.844", "worker", "ws0", "wt", stepIndex=0),
    event("tool.called", "27.848", "worker", "wtool", "ws0", toolCallId="call_1",
          toolName="file-system__write", args={"path": "notes.txt", "content": "hi"}),
    event("tool.completed", "27.850", "worker", "wtool", "ws0", toolCallId="call_1",
          toolName="file-system__write", status="ok", duration=1.766, output={"size": 2}, error=None),
    event("step.completed", "27.850", "worker", "ws0", "wt", stepIndex=0, duration=2.821),
    event("step.started", "27.851", "worker", "ws1", "wt", stepIndex=1),
    event("step.completed", "27.851", "worker", "ws1", "wt", stepIndex=1, duration=0.185),
    event("turn.completed", "27.855", "worker", "wt", "ctool", duration=7.908),
    event("tool.completed", "27.860", "coordinator", "ctool", "cs0", toolName="agents__request",
          status="ok", duration=36.256, output={"response": "wrote 2 bytes"}, error=None),
    event("step.completed", "27.860", "coordinator", "cs0", "ct", stepIndex=0, duration=37.365),
    event("step.started", "27.860", "coordinator", "cs1", "ct", stepIndex=1),
    event("step.completed", "27.861", "coordinator", "cs1", "ct", stepIndex=1, duration=0.173),
    event("turn.completed", "27.863", "coordinator", "ct", duration=45.691),
]  # fmt: skip


def trace_of(events: list[dict[str, Any]]) -> Trace:
    trace = Trace(TRACE)
    for item in events:
        trace.add(read_event(item))
    return trace


def test_a_trace_nests_spans_across_agents_parents_first() -> None:
    body = trace_of(HANDOFF).to_json()
    rows = [(s["agent"], s["kind"], s["name"], s["depth"]) for s in body["spans"]]
    assert rows == [
        ("coordinator", "turn", "coordinator turn", 0),
        ("coordinator", "step", "step 0", 1),
        ("coordinator", "tool", "agents__request", 2),
        ("worker", "turn", "worker turn", 3),
        ("worker", "step", "step 0", 4),
        ("worker", "tool", "file-system__write", 5),
        ("worker", "step", "step 1", 4),
        ("coordinator", "step", "step 1", 1),
    ]
    summary = body["trace"]
    assert summary["rootAgent"] == "coordinator"
    assert summary["status"] == "ok"
    assert summary["spanCount"] == 8
    assert summary["agents"] == ["coordinator", "worker"]
    assert summary["durationMs"] == pytest.approx(45.691, abs=0.01)  # the root Turn, measured


def test_bars_cover_their_children_while_durations_stay_measured() -> None:
    spans = {s["spanId"]: s for s in trace_of(HANDOFF).to_json()["spans"]}
    turn = spans["ct"]
    assert turn["durationMs"] == 45.691
    for child in ("cs0", "cs1", "ctool", "wt"):
        assert turn["startMs"] <= spans[child]["startMs"]
        assert spans[child]["endMs"] <= turn["endMs"]


def test_a_running_trace_and_a_failed_span() -> None:
    running = trace_of(HANDOFF[:5])
    assert running.summary()["status"] == "running"
    failed = trace_of(
        [
            *HANDOFF[:6],
            event("tool.completed", "27.850", "worker", "wtool", "ws0", toolName="file-system__write",
                  status="error", duration=1.0, error={"code": "E_TOOL", "message": "disk full"}),
            event("turn.failed", "27.900", "worker", "wt", "ctool", duration=50.0,
                  errorCode="E_MODEL", errorMessage="the model is down"),
        ]
    )  # fmt: skip
    spans = {s["spanId"]: s for s in failed.to_json()["spans"]}
    assert spans["wtool"]["status"] == "error"
    assert spans["wtool"]["error"] == "disk full (E_TOOL)"
    assert spans["wt"]["error"] == "the model is down (E_MODEL)"
    assert failed.summary()["status"] == "running"  # the coordinator's Turn has not ended


def test_a_call_parked_for_approval_is_a_span_until_it_is_decided() -> None:
    parked = [
        *HANDOFF[3:5],
        event("approval.requested", "28.000", "worker", "apr", "ws0", toolName="bash__exec",
              toolCallId="c9", status="pending", args={"command": "ls"}, approvalId="apr_1"),
    ]  # fmt: skip
    parked_trace = trace_of(parked)
    [*_, waiting] = parked_trace.to_json()["spans"]
    # Parked is no failure: it awaits an operator, and so does the trace.
    assert (waiting["kind"], waiting["name"], waiting["status"], waiting["error"]) == (
        "approval",
        "bash__exec",
        "awaiting",
        None,
    )
    assert (parked_trace.summary()["status"], parked_trace.summary()["error"]) == (
        "awaiting",
        None,
    )
    who = {"via": "unix", "pid": 4242, "uid": 1000, "gid": 1000, "user": "alice"}
    decided = event("approval.decided", "28.500", "worker", "apr", "ws0", toolName="bash__exec",
                    status="rejected", reason="not now", approvalId="apr_1", decidedBy=who)  # fmt: skip
    [*_, rejected] = trace_of([*parked, decided]).to_json()["spans"]
    assert rejected["decidedBy"] == who
    assert rejected["status"] == "error"
    assert rejected["durationMs"] == pytest.approx(500.0)
    assert rejected["error"] == "rejected by an operator: not now (E_TOOL_REJECTED)"


@pytest.mark.parametrize(
    ("item", "level"),
    [
        ({"type": "turn.started"}, "info"),
        ({"type": "turn.failed"}, "error"),
        ({"type": "tool.completed", "status": "error"}, "error"),
        ({"type": "tool.completed", "status": "ok"}, "info"),
        ({"type": "process.exited", "expected": False}, "error"),
        ({"type": "process.exited", "expected": False, "exitCode": 0, "signal": None}, "warning"),
        ({"type": "process.exited", "expected": True, "exitCode": 0, "signal": None}, "info"),
        ({"type": "process.exited", "expected": True}, "info"),
        ({"type": "process.backoff"}, "warning"),
        ({"type": "approval.requested"}, "warning"),
        ({"type": "approval.decided", "status": "rejected"}, "warning"),
        ({"type": "approval.decided", "status": "approved"}, "info"),
        ({"type": "approval.refused"}, "error"),
        ({"type": "delivery.lost"}, "error"),
        ({"type": "budget.exceeded"}, "warning"),
        ({"type": "model.permit.timeout"}, "warning"),
        ({"type": "model.rate_limited"}, "warning"),
        ({"type": "model.permit.waiting"}, "info"),
        ({"type": "model.permit.granted"}, "info"),
        ({"type": "network.connection", "allowed": True}, "info"),
        ({"type": "network.connection", "allowed": False}, "warning"),
    ],
)
def test_event_levels(item: dict[str, Any], level: str) -> None:
    assert event_level(read_event(item)) == level


def tokens(prompt: int, completion: int, cost: float | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "promptTokens": prompt,
        "completionTokens": completion,
        "totalTokens": prompt + completion,
    }
    if cost is not None:
        usage["cost"] = cost
    return usage


def moment(kind: str, stamp: str, agent: str, **fields: Any) -> dict[str, Any]:
    """An event of the Orchestrator's: no span of its own."""
    return {
        "type": kind,
        "timestamp": f"2026-11-23T17:57:{stamp}Z",
        "agentName": agent,
        "traceId": TRACE,
        **fields,
    }


def priced(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with token usage on each Step that called the model, as a priced Model
    reports it (Steps 0 call a tool, Steps 1 answer)."""
    usage = {
        "cs0": tokens(40, 10, 0.0002),
        "cs1": tokens(60, 20, 0.00035),
        "ws0": tokens(30, 5, 0.000125),
        "ws1": tokens(45, 7, 0.000182),
    }
    out = []
    for item in events:
        if item["type"] == "step.completed" and item["spanId"] in usage:
            item = {**item, "tokenUsage": usage[item["spanId"]]}
        out.append(item)
    return out


WAITED = [
    *priced(HANDOFF[:4]),
    # The worker's first model call waits for a permit of its pool, then gets one.
    moment("model.permit.waiting", "27.844", "worker", instanceKey="default", pool="workers",
           reason="maxConcurrent", position=1, inUse=2),
    *priced(HANDOFF[4:5]),
    moment("model.permit.granted", "27.846", "worker", instanceKey="default", pool="workers",
           waitedMs=2, reason="maxConcurrent"),
    *priced(HANDOFF[5:8]),
    # Its usage takes the trace past its budget (said by the Orchestrator, without a span).
    moment("budget.exceeded", "27.850", "worker", budget="trace", root="coordinator",
           figure="totalTokens", used=85, limit=80),
    *priced(HANDOFF[8:]),
]  # fmt: skip


def test_a_trace_sums_the_usage_of_its_steps_across_agents() -> None:
    summary = trace_of(priced(HANDOFF)).summary()
    assert summary["usage"] == {
        "inputTokens": 40 + 60 + 30 + 45,
        "outputTokens": 10 + 20 + 5 + 7,
        "totalTokens": 217,
        "cost": pytest.approx(0.000857),
        "calls": 4,
    }
    unpriced = trace_of(
        [{**e, "tokenUsage": tokens(8, 2)} if e["type"] == "step.completed" else e for e in HANDOFF]
    ).summary()
    assert unpriced["usage"]["totalTokens"] == 40
    assert unpriced["usage"]["cost"] == 0
    assert trace_of(HANDOFF).summary()["usage"]["calls"] == 0  # no usage recorded: none counted


def test_budgets_and_permit_waits_are_marks_on_the_step_they_happened_in() -> None:
    trace = trace_of(WAITED)
    body = trace.to_json()
    plain = trace_of(HANDOFF).to_json()["spans"]
    assert [s["spanId"] for s in body["spans"]] == [s["spanId"] for s in plain]
    marks = [(m["type"], m["spanId"], m["agent"]) for m in body["marks"]]
    assert marks == [
        ("model.permit.waiting", "ws0", "worker"),
        ("model.permit.granted", "ws0", "worker"),
        ("budget.exceeded", "ws0", "worker"),
    ]
    granted = body["marks"][1]
    assert (granted["pool"], granted["waitedMs"], granted["reason"]) == (
        "workers",
        2,
        "maxConcurrent",
    )
    assert granted["atMs"] == epoch_ms("2026-11-23T17:57:27.846Z")
    assert "timestamp" not in granted
    summary = body["trace"]
    assert summary["exceeded"] == [
        {"budget": "trace", "figure": "totalTokens", "used": 85, "limit": 80, "agent": "worker"}
    ]
    assert summary["permitWaitMs"] == 2
    assert summary["status"] == "ok"  # a mark is no span: the trace's status is its spans'
    assert summary["spanCount"] == 8


def test_a_turn_budget_marks_the_turn_that_named_it_and_a_lost_mark_has_no_span() -> None:
    turn_budget = event(
        "budget.exceeded", "27.851", "worker", "wt", "ctool", budget="turn", figure="cost",
        used=0.02, limit=0.01,
    )  # fmt: skip
    stray = moment("model.rate_limited", "27.852", "helper", pool="workers", retryAfterMs=1500)
    body = trace_of([*HANDOFF, turn_budget, stray]).to_json()
    assert [(m["type"], m["spanId"]) for m in body["marks"]] == [
        ("budget.exceeded", "wt"),
        ("model.rate_limited", None),  # an agent with no span in the trace
    ]
    assert body["trace"]["exceeded"][0]["budget"] == "turn"


def test_the_index_sums_each_agents_usage_from_every_step_it_read(tmp_path: Path) -> None:
    other = [{**e, "traceId": "another"} for e in priced(HANDOFF)]
    write_log(tmp_path / "runtime-events.jsonl", [*priced(HANDOFF), *other])
    index = EventIndex(tmp_path, max_events=5)  # usage counts past the window of events kept
    index.refresh()
    assert {name: used.to_json() for name, used in index.usage.items()} == {
        "coordinator": {
            "inputTokens": 200,
            "outputTokens": 60,
            "totalTokens": 260,
            "cost": pytest.approx(0.0011),
            "calls": 4,
        },
        "worker": {
            "inputTokens": 150,
            "outputTokens": 24,
            "totalTokens": 174,
            "cost": pytest.approx(0.000614),
            "calls": 4,
        },
    }
    assert index.traces["another"].usage.total_tokens == 217


async def test_after_the_fact_agent_rows_carry_usage_from_the_log_and_no_pools(
    tmp_path: Path,
) -> None:
    write_log(tmp_path / "runtime-events.jsonl", [*priced(HANDOFF), *WAITED[4:5]])
    body = await Studio(tmp_path).agents()
    assert body["mode"] == "offline"
    assert body["pools"] is None
    rows = {row["agent"]: row for row in body["agents"]}
    assert rows["worker"]["usage"]["totalTokens"] == 87
    assert rows["coordinator"]["usage"]["cost"] == pytest.approx(0.00055)
    assert rows["worker"]["permitsWaiting"] is None


async def test_usage_is_asked_of_the_daemon_with_the_trace_id_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    studio = Studio(tmp_path)
    assert await studio.usage(TRACE, 50) == {"mode": "offline", "trace": None}
    assert await studio.usage(None, 50) == {"mode": "offline", "usage": None}
    (tmp_path / "api.sock").touch()  # a daemon serves the state directory
    asked: list[str] = []
    book = {"total": {}, "traces": [{"traceId": TRACE, "budget": {"totalTokens": 400}}]}

    def answer(state_dir: Path, path: str) -> tuple[int, Any] | None:
        asked.append(path)
        if path.startswith("/v1/usage?trace="):
            known = path == f"/v1/usage?trace={TRACE}"
            return (200, book["traces"][0]) if known else (404, {"error": {}})
        return 200, book

    monkeypatch.setattr(live, "_get", answer)
    assert await studio.usage(TRACE, 50) == {"mode": "live", "trace": book["traces"][0]}
    assert await studio.usage("a b&traces=1", 50) == {"mode": "live", "trace": None}
    assert await studio.usage(None, 7) == {"mode": "live", "usage": book}
    assert await studio.usage(None, 7) == {"mode": "live", "usage": book}  # reused a moment
    assert asked == [
        f"/v1/usage?trace={TRACE}",
        "/v1/usage?trace=a+b%26traces%3D1",  # one value, whatever it holds
        "/v1/usage?traces=7",
    ]


def test_an_event_has_the_same_key_from_the_file_and_from_the_stream() -> None:
    item = HANDOFF[6]
    from_file = json.loads(json.dumps(item, separators=(",", ":")))
    pushed = json.loads(json.dumps(dict(reversed(list(item.items())))))
    assert event_key(read_event(from_file)) == event_key(read_event(pushed))
    assert event_key(read_event(item)) != event_key(read_event(HANDOFF[5]))


def write_log(path: Path, events: list[dict[str, Any]], mode: str = "a") -> None:
    with open(path, mode) as log:
        for item in events:
            log.write(json.dumps(item) + "\n")


def test_the_index_reads_what_is_appended_and_starts_over_on_a_new_file(tmp_path: Path) -> None:
    log = tmp_path / "runtime-events.jsonl"
    index = EventIndex(tmp_path)
    index.refresh()  # no file yet
    assert not index.events
    write_log(log, HANDOFF[:8])
    with open(log, "a") as torn:
        torn.write('{"type": "step.sta')  # a line still being written
    index.refresh()
    assert len(index.events) == 8
    assert index.traces[TRACE].summary()["status"] == "running"
    with open(log, "a") as rest:
        rest.write('rted"}\n')
    write_log(log, HANDOFF[8:])
    index.refresh()
    assert len(index.events) == len(HANDOFF) + 1
    assert index.traces[TRACE].summary()["status"] == "ok"
    assert index.trace_list(agent="worker")[0]["traceId"] == TRACE
    assert index.trace_list(agent="nobody") == []
    replaced = tmp_path / "new.jsonl"
    write_log(replaced, HANDOFF[:2], "w")
    os.replace(replaced, log)  # a new file under the same name
    index.refresh()
    assert len(index.events) == 2


def test_the_index_links_agents_by_handoff_tools_and_by_turn_parentage(tmp_path: Path) -> None:
    spawned = event("turn.started", "29.000", "helper", "ht", "wtool")
    write_log(tmp_path / "runtime-events.jsonl", [*HANDOFF, spawned])
    index = EventIndex(tmp_path)
    index.refresh()
    edges = {(e["from"], e["to"]): e for e in index.edges.values()}
    assert edges[("coordinator", "worker")]["kinds"] == ["request"]
    assert edges[("coordinator", "worker")]["calls"] == 1
    assert edges[("worker", "helper")]["kinds"] == []  # known by parentage only


def test_the_index_keeps_each_agents_last_recorded_state(tmp_path: Path) -> None:
    def process(kind: str, agent: str, **fields: Any) -> dict[str, Any]:
        return {
            "type": f"process.{kind}",
            "timestamp": "2026-11-23T17:58:00.000Z",
            "agentName": agent,
            **fields,
        }

    write_log(
        tmp_path / "runtime-events.jsonl",
        [
            process("spawned", "worker", pid=10),
            process("ready", "worker", pid=10),
            process("exited", "worker", expected=False, reason="signal SIGKILL", signal="SIGKILL"),
            process("restarting", "worker", restarts=1),
            process("spawned", "worker", pid=11),
            process("ready", "worker", pid=11),
            process("spawned", "coordinator", pid=12),
            process("ready", "coordinator", pid=12),
            process("exited", "coordinator", expected=True, reason="exit code 0"),
            process("spawned", "flaky", pid=13),
            process("exited", "flaky", expected=False, reason="exit code 1"),
            process("backoff", "flaky", delaySeconds=4),
        ],
    )  # fmt: skip
    index = EventIndex(tmp_path)
    index.refresh()
    rows = {name: record.row() for name, record in index.agents.items()}
    assert (rows["worker"]["status"], rows["worker"]["pid"]) == ("idle", 11)
    assert (rows["worker"]["restarts"], rows["worker"]["crashes"]) == (1, 1)
    assert rows["worker"]["lastExit"]["reason"] == "signal SIGKILL"
    assert rows["coordinator"]["status"] == "terminated"
    assert rows["flaky"]["status"] == "crashLoopBackOff"


def test_a_clean_exit_after_a_crash_is_no_crash(tmp_path: Path) -> None:
    def exited(agent: str, second: int, **fields: Any) -> dict[str, Any]:
        stamp = f"2026-11-23T17:58:{second:02d}.000Z"
        return {"type": "process.exited", "timestamp": stamp, "agentName": agent, **fields}

    killed = {"expected": False, "exitCode": None, "signal": "SIGKILL", "reason": "signal SIGKILL"}
    clean = {"exitCode": 0, "signal": None, "reason": "exit code 0"}
    write_log(
        tmp_path / "runtime-events.jsonl",
        [
            exited("worker", 1, **killed),
            exited("worker", 2, expected=True, **clean),  # the daemon stopped
            exited("tool", 3, expected=False, **clean),  # exit 0 nobody asked for
        ],
    )
    index = EventIndex(tmp_path)
    index.refresh()
    rows = {name: record.row() for name, record in index.agents.items()}
    # It crashed once, but its last exit was clean: not "crashed ... exit code 0".
    assert (rows["worker"]["status"], rows["worker"]["crashes"]) == ("terminated", 1)
    assert rows["worker"]["lastCrashMs"] is None
    assert rows["worker"]["lastExit"]["reason"] == "exit code 0"
    assert (rows["tool"]["status"], rows["tool"]["crashes"]) == ("terminated", 0)


def test_event_selection_filters_and_keeps_the_newest(tmp_path: Path) -> None:
    write_log(tmp_path / "runtime-events.jsonl", HANDOFF)
    index = EventIndex(tmp_path)
    index.refresh()
    tools = index.select(agent="worker", types=["tool."])
    assert [row["event"]["type"] for row in tools] == ["tool.called", "tool.completed"]
    newest = index.select(limit=2)
    assert [row["event"]["type"] for row in newest] == ["step.completed", "turn.completed"]
    assert index.select(level="warning") == []
    later = index.select(since_ms=epoch_ms("2026-11-23T17:57:27.860Z"))
    assert [row["event"]["type"] for row in later] == [
        "tool.completed",
        "step.completed",
        "step.started",
        "step.completed",
        "turn.completed",
    ]


def message(index: int, role: str, content: str = "", **fields: Any) -> Message:
    return Message(
        id=f"m{index}", role=role, content=content, created_at="2026-11-23T17:57:27.815Z", **fields
    )  # type: ignore[arg-type]


def test_conversations_read_as_the_agents_store_wrote_them(tmp_path: Path) -> None:
    """Written by the agents' own store: folds, an appended segment, unfolded events, a replace."""
    directory = tmp_path / "conversation"
    store = ConversationStore(directory, fsync=False)
    store.load()
    store.append(message(1, "system", "be brief"))
    store.append(message(2, "user", "write notes.txt hi"))
    store.fold()  # the first fold writes the base
    call = ToolCall(id="call_1", name="file-system__write", args={"path": "notes.txt"})
    store.append(message(3, "assistant", tool_calls=(call,)))
    store.append(message(4, "tool", tool_result={"status": "ok", "output": {"size": 2}}))
    store.fold()  # appended as a segment
    store.append(message(5, "assistant", "wrote 2 bytes"))
    store.emit(MessageEvent.replace("m1", message(1, "system", "be very brief")))
    store.emit(MessageEvent.remove("m2"))
    # not folded: a Turn still running (or an agent killed before its fold)
    expected = [m.to_json() for m in ConversationStore(directory, fsync=False).load()]
    assert read_messages(directory) == expected
    assert [m["id"] for m in expected] == ["m1", "m3", "m4", "m5"]
    assert expected[0]["content"] == "be very brief"
    with open(directory / "events.jsonl", "a") as torn:
        torn.write('{"seq": 99, "type": "app')  # a kill mid-write
    assert read_messages(directory) == expected


def test_instances_and_their_conversations_by_agent_and_key(tmp_path: Path) -> None:
    root = tmp_path / "agents" / "worker" / "instances" / "u+4f2a"
    (root / "conversation").mkdir(parents=True)
    used = {"inputTokens": 334, "outputTokens": 6, "totalTokens": 340, "cost": 0.000895, "calls": 3}
    metadata = {
        "agentName": "worker",
        "instanceKey": "u/42",
        "status": "idle",
        "updatedAt": "x",
        "usage": used,
    }
    (root / "metadata.json").write_text(json.dumps(metadata))
    fresh = tmp_path / "agents" / "worker" / "instances" / "fresh"
    fresh.mkdir(parents=True)
    (fresh / "metadata.json").write_text(json.dumps({"agentName": "worker", "instanceKey": "new"}))
    store = ConversationStore(root / "conversation", fsync=False)
    store.load()
    store.append(message(1, "user", "hi"))
    assert instances(tmp_path) == [
        {
            "agent": "worker",
            "instanceKey": "new",
            "status": None,
            "createdAt": None,
            "updatedAt": None,
            "usage": None,  # no model call yet
        },
        {
            "agent": "worker",
            "instanceKey": "u/42",
            "status": "idle",
            "createdAt": None,
            "updatedAt": "x",
            "usage": used,
        },
    ]
    found = conversation(tmp_path, "worker", "u/42")
    assert found is not None
    assert [m["content"] for m in found["messages"]] == ["hi"]
    assert (found["agent"], found["instanceKey"], found["usage"]) == ("worker", "u/42", used)
    assert conversation(tmp_path, "worker", "u+4f2a") is None  # keys, not directory names
    assert conversation(tmp_path, "coordinator", "u/42") is None


def test_a_programs_connections_are_marks_on_its_tool_span() -> None:
    connection = {"toolCallId": "call_1", "toolName": "bash__exec", "protocol": "connect"}
    events = [
        *HANDOFF[:6],
        event("network.connection", "27.849", "worker", "wtool", "ws0", **connection,
              host="api.example.com", port=443, address="93.184.216.34", allowed=True,
              reason=None, bytesUp=517, bytesDown=4120, duration=31.5),
        event("network.connection", "27.849", "worker", "wtool", "ws0", **connection,
              host="169.254.169.254", port=80, address=None, allowed=False,
              reason="169.254.169.254 is in 169.254.0.0/16, not the public internet",
              bytesUp=0, bytesDown=0, duration=0.0),
        *HANDOFF[6:],
    ]  # fmt: skip
    body = trace_of(events).to_json()
    assert len(body["spans"]) == 8  # no span of their own
    marks = [(m["type"], m["spanId"], m["host"], m["allowed"]) for m in body["marks"]]
    assert marks == [
        ("network.connection", "wtool", "api.example.com", True),
        ("network.connection", "wtool", "169.254.169.254", False),
    ]
    assert body["marks"][0]["bytesDown"] == 4120
