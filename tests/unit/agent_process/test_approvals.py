"""Tool calls parked for approval, in-process: scripted model, real executor, real files.

The clock of the gate is injected, so the deadline is tested without waiting for it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent_process.approvals import Approval, ApprovalGate, ApprovalSuspended, DecisionRefused
from agent_process.conversation import ConversationStore
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnResult, TurnRunner
from bundle.scripted import ScriptSpec
from ipc.protocol import APPROVAL_ALREADY_DECIDED, APPROVAL_INVALID_ARGUMENTS, APPROVAL_NOT_FOUND
from tools_base import JsonObject, ToolContext

pytestmark = pytest.mark.timeout(30)

RULES: list[dict[str, Any]] = [
    {
        "when": {"input": "^write (?P<text>.+)$"},
        "call": {"tool": "notes__write", "args": {"text": "{text}"}},
    },
    {
        "when": {"input": "^echo (?P<text>.+)$"},
        "call": {"tool": "notes__echo", "args": {"text": "{text}"}},
    },
    {"when": {"toolResult": "notes__write", "status": "ok"}, "reply": "wrote {result.text}"},
    {"when": {"toolResult": "notes__write"}, "reply": "ERROR {errorCode}: {error}"},
    {"when": {"toolResult": "notes__echo"}, "reply": "echo {result.text}"},
    {"reply": "?"},
]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Fixture:
    def __init__(
        self,
        tmp_path: Path,
        timeout: float = 60,
        tools: frozenset[str] = frozenset({"notes__write"}),
    ) -> None:
        self.written: list[str] = []
        self.events: list[dict[str, Any]] = []
        registry = ToolRegistry()
        schema = {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }
        for export, handler in (("write", self.write), ("echo", self.echo)):
            registry.register(
                ToolCatalogItem(
                    name=f"notes__{export}",
                    parameters=schema,
                    source=ToolSource(type="config", name="notes"),
                ),
                handler,
            )
        self.clock = Clock()
        self.root = tmp_path / "instances"
        self.gate = ApprovalGate(
            "scribe",
            self.root,
            tools=tools,
            timeout_seconds=timeout,
            registry=registry,
            clock=self.clock,
        )
        pipeline = MiddlewarePipeline()
        self.settings = StepSettings(
            agent_name="scribe",
            model=ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="scribe"),
            registry=registry,
            executor=ToolExecutor(registry, pipeline),
            pipeline=pipeline,
            config_tool_names=("notes__write", "notes__echo"),
            approvals=self.gate,
        )
        self.runner = TurnRunner(
            self.settings, events=lambda event: self.events.append(event.to_builtins())
        )
        self.store = ConversationStore(self.root / "default" / "conversation")
        self.store.load()

    def write(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        self.written.append(str(args["text"]))
        return {"text": args["text"]}

    def echo(self, ctx: ToolContext, args: JsonObject) -> JsonObject:
        return {"text": args["text"]}

    def start(self, text: str, *, resume: bool = False) -> asyncio.Task[TurnResult]:
        turn_input = TurnInput(text=text, resume=resume)
        return asyncio.ensure_future(
            self.runner.run("default", self.store, self.root / "default" / "workspace", turn_input)
        )

    async def parked(self) -> str:
        """The id of the approval the running Turn parks on (waits for its event)."""
        async with asyncio.timeout(10):
            while True:
                for event in self.events:
                    if event["type"] in ("approval.requested", "approval.resumed"):
                        return str(event["approvalId"])
                await asyncio.sleep(0)

    def record(self, approval_id: str) -> dict[str, Any]:
        path = next(self.root.glob(f"*/approvals/{approval_id}.json"))
        data: dict[str, Any] = json.loads(path.read_text())
        return data


async def test_a_call_waits_for_approval_then_runs(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    assert f.written == []
    record = f.record(approval_id)
    assert record["status"] == "pending"
    assert (record["toolName"], record["arguments"]) == ("notes__write", {"text": "hello"})
    assert record["instanceKey"] == "default"
    assert record["traceId"]
    assert record["expiresAtUnix"] == f.clock.now + 60
    # The assistant message holding the call is on disk before the approval is.
    on_disk = ConversationStore(f.store.directory).load()
    assert [c.id for c in on_disk[-1].tool_calls] == [record["toolCallId"]]

    f.gate.decide(approval_id, "approve")
    result = await turn
    assert (result.status, result.text) == ("ok", "wrote hello")
    assert f.written == ["hello"]
    assert f.record(approval_id)["settled"] is True
    done = next(e for e in f.events if e["type"] == "turn.completed")
    assert done["output"] == "wrote hello"


async def test_an_approval_with_edited_arguments_runs_with_them(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    with pytest.raises(DecisionRefused) as refused:
        f.gate.decide(approval_id, "approve", arguments={"txt": "x"})
    assert refused.value.code == APPROVAL_INVALID_ARGUMENTS
    f.gate.decide(approval_id, "approve", arguments={"text": "goodbye"})
    assert (await turn).text == "wrote goodbye"
    assert f.written == ["goodbye"]
    tool_message = next(m for m in f.store.messages if m.role == "tool")
    assert tool_message.metadata["__goondanApproval"]["arguments"] == {"text": "goodbye"}


async def test_a_rejection_reaches_the_model_with_its_reason(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    f.gate.decide(approval_id, "reject", reason="not on a Friday")
    result = await turn
    assert result.text.startswith("ERROR E_TOOL_REJECTED: ")
    assert "not on a Friday" in result.text
    assert f.written == []
    with pytest.raises(DecisionRefused) as twice:
        f.gate.decide(approval_id, "approve")
    assert twice.value.code == APPROVAL_ALREADY_DECIDED
    with pytest.raises(DecisionRefused) as unknown:
        f.gate.decide("apr_nope", "approve")
    assert unknown.value.code == APPROVAL_NOT_FOUND


async def test_no_decision_by_the_deadline_is_an_approval_timeout(tmp_path: Path) -> None:
    f = Fixture(tmp_path, timeout=0.05)
    turn = f.start("write hello")
    approval_id = await f.parked()
    f.clock.now += 1  # past the deadline: the real timer fires within 0.05 s and sees it
    result = await turn
    assert result.text.startswith("ERROR E_TOOL_APPROVAL_TIMEOUT: ")
    assert f.record(approval_id)["status"] == "expired"
    with pytest.raises(DecisionRefused) as late:
        f.gate.decide(approval_id, "approve")
    assert late.value.code == APPROVAL_ALREADY_DECIDED


async def test_calls_the_policy_does_not_name_run_at_once(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    result = await f.start("echo hi")
    assert result.text == "echo hi"
    assert not list(f.root.glob("*/approvals/*.json"))


async def test_a_parked_turn_resumes_in_a_new_process_and_answers(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    turn.cancel()  # the process dies while the call is parked (nothing is folded)
    with pytest.raises(asyncio.CancelledError):
        await turn

    again = Fixture(tmp_path)  # a new process: memory empty, files kept
    assert again.gate.load() == ["default"]
    assert again.gate.open_call_ids("default") == {f.record(approval_id)["toolCallId"]}
    resumed = again.start("", resume=True)
    assert await again.parked() == approval_id
    again.gate.decide(approval_id, "approve")
    result = await resumed
    assert (result.status, result.text) == ("ok", "wrote hello")
    assert again.written == ["hello"]
    roles = [m.role for m in ConversationStore(again.store.directory).load()]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_stopping_agent_suspends_the_parked_turn(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    f.gate.suspend_all()
    result = await turn
    assert result.error is not None
    assert result.error.code == "SHUTTING_DOWN"
    assert approval_id in result.error.message
    assert f.record(approval_id)["status"] == "pending"
    # A later Turn of the instance does not close the parked call as interrupted.
    later = Fixture(tmp_path)
    later.gate.load()
    closed = [m for m in later.store.messages if m.role == "tool"]
    assert closed == []


def test_suspended_is_an_exception_naming_the_approval() -> None:
    assert "apr_1" in str(ApprovalSuspended("apr_1"))


async def test_a_decision_taken_while_no_process_runs_stands_after_a_policy_change(
    tmp_path: Path,
) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    # The next process no longer names the tool in its policy; the record still governs.
    again = Fixture(tmp_path, tools=frozenset())
    assert again.gate.load() == ["default"]
    again.gate.decide(approval_id, "reject", reason="changed my mind")
    result = await again.start("", resume=True)
    assert result.text.startswith("ERROR E_TOOL_REJECTED: ")
    assert again.written == []
    assert again.record(approval_id)["settled"] is True


async def test_cancelling_the_request_ends_the_wait_without_running_the_call(
    tmp_path: Path,
) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    trace_id = f.record(approval_id)["traceId"]
    assert f.runner.cancel(trace_id, "wrong question") == 1
    result = await turn
    assert result.finish_reason == "cancelled"
    assert f.written == []
    record = f.record(approval_id)
    assert (record["status"], record["reason"], record["settled"]) == (
        "cancelled",
        "wrong question",
        True,
    )
    tool = next(m for m in f.store.messages if m.role == "tool")
    assert tool.tool_result is not None
    assert tool.tool_result["error"]["code"] == "E_TOOL_CANCELLED"
    with pytest.raises(DecisionRefused) as late:
        f.gate.decide(approval_id, "approve")
    assert late.value.code == APPROVAL_ALREADY_DECIDED


async def test_a_decision_records_who_made_it_on_disk_and_in_its_event(tmp_path: Path) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    who = {"via": "unix", "pid": 4242, "uid": 1000, "gid": 1000, "user": "alice"}
    f.gate.decide(approval_id, "approve", decided_by=who)
    assert (await turn).text == "wrote hello"
    assert f.record(approval_id)["decidedBy"] == who
    decided = next(e for e in f.events if e["type"] == "approval.decided")
    assert decided["decidedBy"] == who
    # A new process reads it back with the rest of the record.
    assert Approval.from_json(f.record(approval_id), Path()).decided_by == who


async def test_a_record_from_before_decisions_named_their_maker_still_resumes(
    tmp_path: Path,
) -> None:
    f = Fixture(tmp_path)
    turn = f.start("write hello")
    approval_id = await f.parked()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    path = next(f.root.glob(f"*/approvals/{approval_id}.json"))
    old = json.loads(path.read_text())
    old.pop("decidedBy", None)
    old.update(status="approved", decidedAt="2026-01-31T12:00:00.000Z")
    path.write_text(json.dumps(old))
    again = Fixture(tmp_path)
    assert again.gate.load() == ["default"]
    result = await again.start("", resume=True)
    assert result.text == "wrote hello"
    record = again.record(approval_id)
    assert "decidedBy" not in record
    assert (record["status"], record["settled"]) == ("approved", True)
