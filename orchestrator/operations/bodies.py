"""The request bodies the HTTP API takes, and the answer of a Turn, as types: for the OpenAPI
document (:mod:`orchestrator.http.openapi`) and its clients.

The routes read their bodies field by field (:class:`orchestrator.http.body.Fields`, which
names the field a refusal is about); a test pins these types' fields to what the routes take,
so the document cannot promise a field a route refuses.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from orchestrator.operations.answers import Answer


class TurnRequest(Answer, omit_defaults=True):
    """``POST /v1/agents/{agent}/requests``: run a Turn and wait for its answer."""

    input: str
    """The text the agent answers (not empty)."""
    instance_key: str | UnsetType = UNSET
    """The conversation (default: ``default``)."""
    timeout_ms: int | UnsetType = UNSET
    """How long to wait, 1 to 604800000 ms (default: the swarm's request timeout)."""
    stream: bool | UnsetType = UNSET
    """Answer with server-sent events: the text as it comes, then the answer."""
    relay: bool | UnsetType = UNSET
    """With ``stream``: the text of the agents it asks, too."""
    approvals: bool | UnsetType = UNSET
    """Answer with server-sent events that include the Turn's approval events."""


class SendRequest(Answer, omit_defaults=True):
    """``POST /v1/agents/{agent}/sends``: deliver text, nobody waits."""

    input: str
    """The text."""
    instance_key: str | UnsetType = UNSET
    """The conversation (default: ``default``)."""


class CancelRequest(Answer, omit_defaults=True):
    """``POST /v1/requests/{id}/cancel``."""

    reason: str | UnsetType = UNSET
    """Why (default: ``cancelled by an operator``)."""


class ApproveRequest(Answer, omit_defaults=True):
    """``POST /v1/approvals/{id}/approve``."""

    arguments: dict[str, Any] | UnsetType = UNSET
    """Run the call with these arguments instead (they must fit the tool's schema)."""


class RejectRequest(Answer):
    """``POST /v1/approvals/{id}/reject``."""

    reason: str
    """What the model is told."""


class TurnFailure(Answer, omit_defaults=True):
    """Why a request's Turn has no answer."""

    code: str
    """The error code (see the error-code reference)."""
    message: str
    """What went wrong, in words."""
    details: dict[str, Any] | UnsetType = UNSET
    """More about it, by code (the attempts of a Turn that crashed its agent, say)."""


class TurnAnswer(Answer, omit_defaults=True):
    """The answer of a request (``POST .../requests``, ``GET /v1/requests/{id}``): 200 when
    the Turn answered, else the status its error maps to."""

    status: Literal["ok", "error"]
    """Whether the Turn answered."""
    output: Any = None
    """The answer text (a failed Turn's last text, if any)."""
    turn: dict[str, Any] | UnsetType | None = UNSET
    """The Turn's summary: ids, steps, duration, token usage."""
    error: TurnFailure | UnsetType | None = UNSET
    """Why it failed."""
    request_id: str | UnsetType = UNSET
    """The request's id (``X-Goondan-Request-Id``)."""


BODIES: tuple[type[msgspec.Struct], ...] = (
    TurnRequest,
    SendRequest,
    CancelRequest,
    ApproveRequest,
    RejectRequest,
    TurnAnswer,
)
"""Every type of this module the OpenAPI document names."""
