"""Runtime events said in a sentence, one phrasing for every face: the studio's Logs view shows
it under each event (the API hands it out as the event's ``sentence``) and ``logs`` prints it
in place of the event's raw fields.

Only events a sentence says better than their fields have one: the approvals of tool calls
parked for an operator (who decided, what, why). Light: the CLI imports it for ``logs``.
"""

from __future__ import annotations

from typing import Any

from ipc.runtime_events import AnyEvent, EventType

__all__ = ["event_sentence"]


def _decider(decided_by: object) -> str:
    """A recorded ``decidedBy`` in words: ``uid 1000 (alice) pid 42 on api.sock``."""
    from orchestrator.approvals import describe_decider

    return describe_decider(decided_by) if isinstance(decided_by, dict) else "unknown"


def _call(data: dict[str, Any]) -> str:
    """``apr_… (bash__exec)``: the approval and the tool it holds back."""
    tool = data.get("toolName")
    return f"{data.get('approvalId', '?')}" + (f" ({tool})" if tool else "")


def _approval(kind: str, data: dict[str, Any]) -> str | None:
    call = _call(data)
    reason = data.get("reason")
    if kind == EventType.APPROVAL_REQUESTED:
        expires = data.get("expiresAt")
        return f"{call} waits for an operator" + (f" until {expires}" if expires else "")
    if kind == EventType.APPROVAL_RESUMED:
        return f"{call} waits for an operator again, taken up after a restart"
    if kind == EventType.APPROVAL_DECIDED:
        text = f"{call} {data.get('status', 'decided')}"
        if data.get("decidedBy") is not None:
            text += f" by {_decider(data['decidedBy'])}"
        if data.get("editedArgs") is not None:
            text += ", its arguments edited"
        return text + (f": {reason}" if reason else "")
    if kind == EventType.APPROVAL_EXPIRED:
        return f"{call} expired: nobody decided in time"
    if kind == EventType.APPROVAL_CANCELLED:
        why = reason or data.get("errorMessage") or "its request was cancelled"
        return f"{call} no longer waits: {why}"
    if kind == EventType.APPROVAL_REFUSED:
        who = _decider(data.get("decidedBy"))
        return f"a decision on {call} refused ({who}): {reason or 'not allowed'}"
    return None


def event_sentence(event: AnyEvent, data: dict[str, Any] | None = None) -> str | None:
    """What ``event`` says, in a sentence (``None``: its fields say it best). ``data`` is its
    JSON object when the caller has it already."""
    kind = event.type
    if not kind.startswith("approval."):
        return None
    return _approval(kind, event.to_builtins() if data is None else data)
