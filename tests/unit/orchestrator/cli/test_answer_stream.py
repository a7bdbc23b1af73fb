"""What the CLI prints of a request's events: streamed text by Step, and approval notices."""

from __future__ import annotations

import argparse
import io
import json
import sys

import pytest

from ipc.runtime_events import AnyEvent, read_event
from orchestrator.cli.answer_stream import ARGUMENTS_SHOWN, AnswerPrinter, ApprovalNotices


def printer(**options: object) -> tuple[AnswerPrinter, io.StringIO]:
    out = io.StringIO()
    return AnswerPrinter(argparse.Namespace(**options), stream=True, out=out), out


def delta(agent: str, step: str, text: str) -> dict[str, object]:
    return {"agent": agent, "stepId": step, "text": text}


def test_each_step_starts_a_line_and_the_answer_is_not_repeated() -> None:
    shown, out = printer()
    for piece in ("wrote ", "2 bytes"):
        shown("delta", delta("worker", "w1", piece))
    for piece in ("Done: ", "wrote 2 bytes"):
        shown("delta", delta("lead", "l1", piece))
    shown.finish("lead", "Done: wrote 2 bytes")
    assert out.getvalue() == "wrote 2 bytes\nDone: wrote 2 bytes\n"


def test_an_answer_that_did_not_stream_follows_what_did() -> None:
    shown, out = printer()
    shown("delta", delta("worker", "w1", "working"))
    shown.finish("lead", "the answer")
    assert out.getvalue() == "working\nthe answer\n"

    shown, out = printer()
    shown.finish("lead", "")  # nothing streamed, an empty answer: a line, as print("") gives
    assert out.getvalue() == "\n"


def test_a_failure_ends_the_text_line_and_adds_nothing() -> None:
    shown, out = printer()
    shown("delta", delta("lead", "l1", "half a"))
    shown.finish("lead", None)
    assert out.getvalue() == "half a\n"

    shown, out = printer()
    shown.finish("lead", None)
    assert out.getvalue() == ""


def test_json_prints_one_object_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    shown, out = printer(json=True)
    shown("delta", delta("lead", "l1", "hi"))
    shown("approval", {"type": "approval.expired", "approvalId": "apr_1", "toolName": "t__x"})
    shown.finish("lead", "hi")  # the caller prints the answer's own line
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == [
        "delta",
        "approval",
    ]
    assert "apr_1 (t__x) expired" in capsys.readouterr().err  # and told on stderr too


def requested(arguments: object) -> AnyEvent:
    return read_event(
        {
            "type": "approval.requested",
            "approvalId": "apr_00000000000000aa",
            "agentName": "worker",
            "instanceKey": "u1",
            "toolName": "bash__exec",
            "args": arguments,
        }
    )


def test_a_parked_call_is_told_with_the_commands_as_invoked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/goondan", "send"])
    err = io.StringIO()
    ApprovalNotices(argparse.Namespace(state_dir="/srv/my state"), out=err)(
        requested({"command": "ls"})
    )
    assert err.getvalue().splitlines() == [
        'waiting for approval apr_00000000000000aa: worker@u1  bash__exec  {"command": "ls"}',
        "  approve: goondan approve apr_00000000000000aa --state-dir '/srv/my state' "
        '[--args \'{"command": "ls"}\']',
        "  reject:  goondan reject apr_00000000000000aa --state-dir '/srv/my state' --reason TEXT",
    ]


def test_long_arguments_are_cut_and_not_offered_as_args() -> None:
    err = io.StringIO()
    ApprovalNotices(argparse.Namespace(), out=err)(requested({"command": "x" * 500}))
    first, approve, _ = err.getvalue().splitlines()
    assert first.endswith("…")
    assert len(first.split("  ")[-1]) == ARGUMENTS_SHOWN + 1
    assert approve.endswith("[--args JSON]")


def test_a_decision_names_who_made_it_and_why() -> None:
    err = io.StringIO()
    notices = ApprovalNotices(argparse.Namespace(), out=err)
    decided = {"type": "approval.decided", "approvalId": "apr_1", "toolName": "bash__exec"}
    notices(
        read_event(
            {**decided, "status": "rejected", "reason": "not\x1b[2J here", "decidedBy": None}
        )
    )
    notices(
        read_event(
            {
                **decided,
                "status": "approved",
                "editedArgs": {"command": "true"},
                "decidedBy": {"via": "unix", "uid": 1000, "user": "alice", "pid": 42},
            }
        )
    )
    assert err.getvalue().splitlines() == [
        "apr_1 (bash__exec) rejected: not\\x1b[2J here",  # no terminal control from a reason
        "apr_1 (bash__exec) approved by uid 1000 (alice) pid 42 on api.sock"
        ' with arguments {"command": "true"}',
    ]


@pytest.mark.parametrize(
    "body",
    [
        None,
        "text",
        {},
        {"status": "ok"},
        {"status": "ok", "output": "hi", "turn": {"turnId": "t"}, "requestId": "req_1"},
        {"status": "ok", "output": {"structured": [1, 2]}},
        {"status": "maybe"},
        {"status": 1},
        {"status": "ok", "turn": "not an object"},
        {"error": {"code": "AGENT_NOT_FOUND", "message": "no such agent"}},
        {"status": "error", "error": {"code": "AGENT_NOT_FOUND", "message": "no such agent"}},
        {"status": "error", "error": {"code": "E_SOMETHING_NEW"}},
        {"status": "error", "error": {"message": "no code"}},
        {"status": "error", "error": {}},
        {"status": "error", "error": "a string"},
        {"status": "error", "error": None, "output": "partial"},
    ],
)
def test_send_reads_an_answer_as_the_ipc_type_does(body: object) -> None:
    """``send`` reads a request's answer without importing ``ipc.delegation``; it must read
    every body as ``DelegateAnswer.from_wire`` does."""
    from ipc.delegation import DelegateAnswer
    from ipc.messages import IpcError
    from orchestrator.cli.answer_stream import read_answer

    try:
        typed = DelegateAnswer.from_wire(body)
        error = typed.error
        wanted = (
            typed.status,
            typed.output,
            *((error.code, error.message) if error else (None,) * 2),
        )
    except IpcError:
        wanted = None
    read = read_answer(body)
    got = None if read is None else (read.status, read.output, read.error_code, read.error_message)
    assert got == wanted
