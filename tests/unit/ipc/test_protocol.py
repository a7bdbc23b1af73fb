"""The protocol module is the one description of the wire: its docstring, its kinds and the
dispatch tables of both processes agree, and every body survives the round trip."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from agent_process.main import AgentProcess
from bundle import load_bundle
from ipc import ORCHESTRATOR, EventMessage, IpcError, build
from ipc import protocol as wire
from ipc.codec import FrameDecoder, encode
from ipc.delegation import Handoff
from ipc.events import (
    EVENT_BODIES,
    BootFailed,
    Cancel,
    ConnectorEventReport,
    ConnectorEventSettled,
    ConnectorHealth,
    LeaderChanged,
    ModelUsage,
    Ready,
    RestartRequest,
    RuntimeEventReport,
    Send,
    SendDone,
    SendFailed,
    SendRefused,
    SendStarted,
    ShutdownAck,
    StatusChanged,
    TextDelta,
    TurnCompleted,
    read_event,
)
from ipc.payload import EventBody
from ipc.protocol import EventKind
from ipc.questions import (
    ApprovalDecision,
    ApprovalDecisionResult,
    ConfigCheck,
    ConfigCheckResult,
    DeleteInstance,
    DeleteInstanceResult,
    ListRequest,
    ListResult,
    ModelPermitRequest,
    ModelPermitResult,
    PrepareInstance,
    PrepareInstanceResult,
    RestartInstance,
    RestartInstanceResult,
    SpawnRequest,
    SpawnResult,
)
from ipc.runtime_events import RawEvent, TurnStartedEvent
from orchestrator.daemon import Orchestrator
from orchestrator.dispatch import Dispatcher
from orchestrator.router import Router
from orchestrator.supervisor import Supervisor
from orchestrator.testing import FakeTransport, fake_plans

ROOT = Path(__file__).resolve().parents[3]


def documented_kinds(direction: str) -> set[str]:
    """The kinds the module docstring lists under ``Event kinds (<direction>):``."""
    doc = wire.__doc__ or ""
    section = doc.split(f"Event kinds ({direction}):", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"^``(\w+)``", section, flags=re.MULTILINE))


def test_the_docstring_lists_exactly_the_kinds_of_each_direction() -> None:
    assert documented_kinds("agent → Orchestrator") == set(wire.AGENT_TO_ORCHESTRATOR)
    assert documented_kinds("Orchestrator → agent") == set(wire.ORCHESTRATOR_TO_AGENT)
    assert documented_kinds("connector → Orchestrator") == set(wire.CONNECTOR_TO_ORCHESTRATOR)
    assert documented_kinds("Orchestrator → connector") == set(wire.ORCHESTRATOR_TO_CONNECTOR)
    assert set(EventKind) == (
        wire.AGENT_TO_ORCHESTRATOR
        | wire.ORCHESTRATOR_TO_AGENT
        | wire.CONNECTOR_TO_ORCHESTRATOR
        | wire.ORCHESTRATOR_TO_CONNECTOR
    )
    assert set(EVENT_BODIES) == set(EventKind)


async def test_the_orchestrator_handles_every_kind_an_agent_sends(tmp_path: Path) -> None:
    daemon = Orchestrator.from_bundle(ROOT / "goondan.yaml.example", state_dir=tmp_path)
    daemon.events.close()
    assert set(daemon.dispatch.events) == wire.AGENT_TO_ORCHESTRATOR
    supervisor = Supervisor(fake_plans("a"), FakeTransport())
    router = Router(supervisor)
    daemon_kinds = {EventKind.RUNTIME_EVENT, EventKind.RESTART_REQUEST, EventKind.CONFIG_CHECK}
    table = Dispatcher(
        router,
        supervisor.event_handlers,
        daemon.broker.event_handlers,
        dict.fromkeys(daemon_kinds, print),
    )
    assert set(table.events) == wire.AGENT_TO_ORCHESTRATOR


def test_an_agent_handles_every_kind_the_orchestrator_sends(tmp_path: Path) -> None:
    plan = load_bundle(ROOT / "goondan.yaml.example").agent_plan("worker", tmp_path)
    assert set(AgentProcess(plan).event_handlers) == wire.ORCHESTRATOR_TO_AGENT


BODIES = [
    Ready(12, "scope"),
    BootFailed("bad"),
    StatusChanged("processing"),
    TurnCompleted("k", "ok"),
    ShutdownAck(),
    RuntimeEventReport(TurnStartedEvent()),
    RuntimeEventReport(RawEvent({"type": "turn.paused", "why": 1})),
    RestartRequest("tool"),
    TextDelta("corr_1", "hel", "t" * 32, "k", "turn-1", "turn-1-step-0"),
    Send(Handoff(target="b", input="hi", event_id="e", call_chain=("a@k",), source="a")),
    SendStarted("e"),
    SendDone("e"),
    SendRefused("e", IpcError("no", code="X")),
    SendFailed("e", "b", "k", IpcError("no", code="X")),
    SpawnRequest("b", None, "/w", "k"),
    SpawnResult("b", "k2", True, "/w"),
    ListRequest("k", True),
    ListResult([{"target": "b"}]),
    ConfigCheck(),
    ConfigCheckResult(("goondan.yaml:3: Swarm/s: spec: bad (E_CONFIG_SCHEMA_INVALID)",)),
    PrepareInstance("k2", None, "a", "k"),
    PrepareInstanceResult("k2", False, "/w"),
    DeleteInstance("k2"),
    DeleteInstanceResult(False, error="busy"),
    RestartInstance("k3"),
    RestartInstanceResult(True, loaded=True, stopped_turns=1),
    ApprovalDecision("apr_1", "approve", {"command": "ls"}),
    ApprovalDecision("apr_1", "reject", reason="no"),
    ApprovalDecision("apr_1", "approve", decided_by={"via": "unix", "pid": 7, "uid": 0}),
    ApprovalDecisionResult({"approvalId": "apr_1", "status": "approved"}),
    ModelPermitRequest("openai-key", "t" * 32, "k", 1200, 60_000),
    ModelPermitRequest("", "t" * 32, "k", 1200, 60_000, 500, 0.0045),
    ModelPermitResult(15),
    ModelUsage("t" * 32, "k", "corr_1", "openai-key", 1200, 80, 0.0038, 2000),
    Cancel("f" * 32, "wrong question"),
    LeaderChanged("host-2:4242"),
    ConnectorEventReport("ev1", "telegram_message", "hi", "telegram:42", {"chat_id": "42"}),
    ConnectorEventSettled("ev1", "AGENT_CRASHED: gone"),
    ConnectorHealth("telegram getUpdates: HTTP 500"),
    ConnectorHealth(None),
]


def test_a_refused_permit_keeps_its_code_across_the_pipe() -> None:
    error = IpcError("trace budget exceeded", code="E_BUDGET_EXCEEDED", details={"used": 5})
    decoded = read_event(build.event("a", "b", ModelPermitResult(3, error)))
    assert isinstance(decoded, ModelPermitResult)
    assert not decoded.granted
    assert decoded.waited_ms == 3
    assert decoded.error is not None
    assert decoded.error.to_dict() == error.to_dict()


def test_a_usage_report_with_a_negative_cost_is_refused() -> None:
    message = build.event("a", "b", ModelUsage("t", cost=1.0))
    bad = msgspec.structs.replace(message, payload={**message.payload, "cost": -1})
    with pytest.raises(wire.MalformedPayload, match="cost"):
        read_event(bad)


def test_a_decision_whose_maker_is_not_an_object_is_refused() -> None:
    message = build.event("a", "b", ApprovalDecision("apr_1", "approve"))
    bad = msgspec.structs.replace(message, payload={**message.payload, "decidedBy": "root"})
    with pytest.raises(wire.MalformedPayload, match="decidedBy"):
        read_event(bad)


def test_every_kind_has_a_body_in_this_test() -> None:
    assert {body.KIND for body in BODIES} == set(EventKind)


@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.KIND.value)
def test_every_body_survives_the_round_trip(body: EventBody) -> None:
    decoded = read_event(build.event("a", "b", body))
    if isinstance(body, SendRefused | SendFailed):
        assert decoded.to_wire() == body.to_wire()  # errors compare by their wire form
    else:
        assert decoded == body


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"target": "b", "input": 3}, "input"),
        ({"target": "b", "input": "hi", "callChain": "a@k"}, "callChain"),
        ({"target": "b", "input": "hi", "async": "yes"}, "async"),
        ({"target": "b", "input": "hi", "timeoutMs": "60"}, "timeoutMs"),
        ({"target": "b", "input": "hi", "metadata": []}, "metadata"),
        ({"target": "b", "input": "hi", "streamId": 7}, "streamId"),
        ({"target": "b", "input": "hi", "relay": "all"}, "relay"),
    ],
)
def test_a_payload_of_the_wrong_shape_is_refused_naming_the_field(
    payload: dict[str, object], field: str
) -> None:
    with pytest.raises(wire.MalformedPayload) as refused:
        Handoff.from_wire(payload)
    assert refused.value.code == "IPC_MALFORMED_PAYLOAD"
    assert refused.value.details == {"field": field}
    assert f"delegate.{field}" in refused.value.message


def test_an_unknown_or_malformed_event_is_refused() -> None:
    with pytest.raises(wire.UnknownEvent):
        read_event(EventMessage(sender="a", to="b", payload={"kind": "bogus"}))
    with pytest.raises(wire.MalformedPayload):
        read_event(EventMessage(sender="a", to="b", payload=[1, 2]))
    with pytest.raises(wire.MalformedPayload):
        read_event(EventMessage(sender="a", to="b", payload={"kind": "status", "status": "x"}))


def test_missing_optional_fields_take_the_protocol_defaults() -> None:
    handoff = Handoff.from_wire({"target": "b", "input": "hi", "instanceKey": ""})
    assert handoff.instance_key == wire.DEFAULT_INSTANCE_KEY
    assert (handoff.call_chain, handoff.timeout_ms, handoff.background) == ((), None, False)
    assert handoff.node == "b@default"
    assert (handoff.stream_id, handoff.relay) == ("", False)


def test_a_streamed_handoff_survives_the_round_trip_and_a_plain_one_says_nothing_of_it() -> None:
    streamed = Handoff(target="b", input="hi", stream_id="corr_1", relay=True)
    assert Handoff.from_wire(streamed.to_wire()) == streamed
    plain = Handoff(target="b", input="hi").to_wire()
    assert "streamId" not in plain
    assert "relay" not in plain


def test_a_runtime_event_crosses_the_pipe_typed_in_the_frame_its_json_object_made() -> None:
    started = TurnStartedEvent(
        timestamp="t", agent_name="a", trace_id="x" * 32, span_id="s1", turn_id="turn-1"
    )
    typed = build.event("a", ORCHESTRATOR, RuntimeEventReport(started))
    payload = {"kind": "runtime_event", "event": started.to_builtins()}
    assert encode(typed) == encode(EventMessage(sender="a", to=ORCHESTRATOR, payload=payload))
    [decoded] = FrameDecoder().feed(encode(typed))
    assert isinstance(decoded, EventMessage)
    body = read_event(decoded)
    assert isinstance(body, RuntimeEventReport)
    assert isinstance(body.event, TurnStartedEvent)
    assert body.event == started


def test_a_runtime_event_of_a_newer_agent_is_kept_whole_and_a_non_object_refused() -> None:
    newer = {"type": "turn.paused", "agentName": "a", "why": [1]}
    payload = {"kind": "runtime_event", "event": newer}
    body = read_event(EventMessage(sender="a", to="b", payload=payload))
    assert isinstance(body, RuntimeEventReport)
    assert body.event == RawEvent(newer)
    assert body.to_wire() == {"event": newer}
    with pytest.raises(wire.MalformedPayload) as refused:
        read_event(EventMessage(sender="a", to="b", payload={"kind": "runtime_event", "event": 1}))
    assert refused.value.details == {"field": "event"}
