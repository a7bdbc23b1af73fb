"""``approvals``, ``approve`` and ``reject``: the tool calls parked for an operator's
decision."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from orchestrator.cli.common import ask_daemon, fail, refused, state_dir_of


def cmd_approvals(args: argparse.Namespace) -> int:
    """Tool calls waiting for an operator's approval (read from the state directory, so no
    daemon is needed; a daemon at ``--api-url`` is asked); ``--all`` shows decided ones too."""
    import msgspec

    from orchestrator.approvals import list_approvals, print_approvals
    from orchestrator.cli.api_target import TargetError, remote_rows, remote_url
    from orchestrator.operations.answers import ApprovalRow
    from orchestrator.operations.encoding import convert, plain

    try:
        if remote_url(args) is not None:
            decided = "1" if args.all else None
            found = remote_rows(args, "/v1/approvals", "approvals", agent=args.agent, all=decided)
            rows = convert(found, list[ApprovalRow])
        else:
            rows = list_approvals(state_dir_of(args), agent=args.agent, include_decided=args.all)
    except TargetError as exc:
        return fail(args, exc.exit_code, str(exc))
    except msgspec.ValidationError as exc:
        return fail(args, 1, f"the daemon's approvals are not understood: {exc}")
    if args.json:
        print(json.dumps(plain(rows), indent=2))
        return 0
    if not rows:
        print("no approvals" if args.all else "nothing waits for approval")
    print_approvals(rows)
    return 0


def _decide(args: argparse.Namespace, decision: str, body: dict[str, Any]) -> int:
    """``approve``/``reject``: the decision through the daemon; exit 1 when refused."""
    from orchestrator.http.client import path_segment

    query = "?wait=1" if args.wait else ""
    path = f"/v1/approvals/{path_segment(args.id)}/{decision}{query}"
    status, answer = ask_daemon(args, "POST", path, body)
    if args.json:
        print(json.dumps(answer))
        return 0 if status < 400 else 1
    if refused(status, answer):
        return 1
    from msgspec import UnsetType

    from orchestrator.cli.common import read_as
    from orchestrator.operations.answers import ApprovalAnswer

    decided = read_as(args, answer, ApprovalAnswer)
    if decided is None:
        return 1
    approval = decided.approval
    print(f"{approval.status} {approval.approval_id} ({approval.tool_name})")
    if not args.wait:
        return 0
    turn = decided.turn
    if turn is None or isinstance(turn, UnsetType):
        print("error: the Turn did not answer within the request timeout", file=sys.stderr)
        return 1
    if turn.status == "ok":
        print(turn.output or "")
        return 0
    error = turn.error
    code, message = (None, None) if isinstance(error, UnsetType) else (error.code, error.message)
    print(f"error: {message} ({code})", file=sys.stderr)
    return 1


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a parked tool call: it runs (with ``--args`` in place of the model's)."""
    body: dict[str, Any] = {}
    if args.args is not None:
        try:
            arguments = json.loads(args.args)
        except ValueError as exc:
            print(f"error: --args is not JSON: {exc}", file=sys.stderr)
            return 2
        if not isinstance(arguments, dict):
            print("error: --args must be a JSON object", file=sys.stderr)
            return 2
        body["arguments"] = arguments
    return _decide(args, "approve", body)


def cmd_reject(args: argparse.Namespace) -> int:
    """Reject a parked tool call: the model gets ``E_TOOL_REJECTED`` with the reason."""
    return _decide(args, "reject", {"reason": args.reason})
