"""Runtime events said in a sentence, one phrasing for every face: the studio's Logs view shows
it under each event (the API hands it out as the event's ``sentence``) and ``logs`` prints it
in place of the event's raw fields.

Only events a sentence says better than their fields have one: the approvals of tool calls
parked for an operator (who decided, what, why). Light: the CLI imports it for ``logs``.
"""

from __future__ import annotations

from msgspec import UNSET

from ipc.runtime_events import AnyEvent, ApprovalEvent, EventType

__all__ = ["event_sentence"]


def _given(value: object) -> bool:
    """The field was recorded with a value (neither left out nor ``null``)."""
    return value is not None and value is not UNSET


def _decider(decided_by: object) -> str:
    """A recorded ``decidedBy`` in words: ``uid 1000 (alice) pid 42 on api.sock``."""
    from orchestrator.approvals import describe_decider

    return describe_decider(decided_by) if isinstance(decided_by, dict) else "unknown"


def _approval(event: ApprovalEvent) -> str | None:
    kind, reason, tool = event.type, event.reason, event.tool_name
    call = (event.approval_id or "?") + (f" ({tool})" if tool else "")
    if kind == EventType.APPROVAL_REQUESTED:
        expires = event.expires_at
        return f"{call} waits for an operator" + (f" until {expires}" if expires else "")
    if kind == EventType.APPROVAL_RESUMED:
        return f"{call} waits for an operator again, taken up after a restart"
    if kind == EventType.APPROVAL_DECIDED:
        text = f"{call} {event.status or 'decided'}"
        if _given(event.decided_by):
            text += f" by {_decider(event.decided_by)}"
        if _given(event.edited_args):
            text += ", its arguments edited"
        return text + (f": {reason}" if reason else "")
    if kind == EventType.APPROVAL_EXPIRED:
        return f"{call} expired: nobody decided in time"
    if kind == EventType.APPROVAL_CANCELLED:
        why = reason or event.error_message or "its request was cancelled"
        return f"{call} no longer waits: {why}"
    if kind == EventType.APPROVAL_REFUSED:
        who = _decider(event.decided_by)
        return f"a decision on {call} refused ({who}): {reason or 'not allowed'}"
    return None


def event_sentence(event: AnyEvent) -> str | None:
    """What ``event`` says, in a sentence (``None``: its fields say it best)."""
    return _approval(event) if isinstance(event, ApprovalEvent) else None
