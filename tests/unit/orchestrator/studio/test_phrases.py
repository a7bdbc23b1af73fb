"""Approval events said in one sentence, the one the studio's Logs view and ``logs`` share."""

from __future__ import annotations

from typing import Any

from ipc.runtime_events import read_event
from orchestrator.studio.events import wrap
from orchestrator.studio.phrases import event_sentence

ALICE = {"via": "unix", "uid": 1000, "user": "alice", "pid": 4242}


def approval(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": f"approval.{kind}",
        "timestamp": "2026-11-23T17:58:00.000Z",
        "agentName": "worker",
        "instanceKey": "default",
        "approvalId": "apr_1f2e3d4c5b6a7980",
        "toolName": "bash__exec",
        **fields,
    }


def said(item: dict[str, Any]) -> str | None:
    return event_sentence(read_event(item))


def test_each_approval_event_has_its_sentence() -> None:
    call = "apr_1f2e3d4c5b6a7980 (bash__exec)"
    assert said(approval("requested", expiresAt="2026-11-23T18:58:00.000Z")) == (
        f"{call} waits for an operator until 2026-11-23T18:58:00.000Z"
    )
    assert (
        said(approval("resumed")) == f"{call} waits for an operator again, taken up after a restart"
    )
    assert said(
        approval("decided", status="approved", decidedBy=ALICE, editedArgs={"command": "ls -la"})
    ) == (f"{call} approved by uid 1000 (alice) pid 4242 on api.sock, its arguments edited")
    assert said(approval("decided", status="rejected", decidedBy=ALICE, reason="not here")) == (
        f"{call} rejected by uid 1000 (alice) pid 4242 on api.sock: not here"
    )
    assert said(approval("expired")) == f"{call} expired: nobody decided in time"
    assert said(approval("cancelled")) == f"{call} no longer waits: its request was cancelled"
    refused = approval(
        "refused",
        decidedBy={"via": "tcp", "anonymous": True, "address": "10.0.0.7:5"},
        reason="no token",
    )
    assert said(refused) == f"a decision on {call} refused (anonymous from 10.0.0.7:5): no token"


def test_other_events_keep_their_fields_and_the_api_hands_the_sentence_out() -> None:
    turn = {"type": "turn.started", "timestamp": "2026-11-23T17:58:00.000Z", "agentName": "worker"}
    assert said(turn) is None
    assert wrap(read_event(turn))["sentence"] is None
    item = wrap(read_event(approval("decided", status="approved", decidedBy=ALICE)))
    assert (
        item["sentence"]
        == "apr_1f2e3d4c5b6a7980 (bash__exec) approved by uid 1000 (alice) pid 4242 on api.sock"
    )
