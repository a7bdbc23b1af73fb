"""Tool results and errors."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal

from goondan.defaults import ERROR_MESSAGE_LIMIT
from goondan.errors import ToolCode, ToolFailure
from tools_base._json import JsonObject, JsonValue

ToolStatus = Literal["ok", "error", "pending"]

DEFAULT_ERROR_MESSAGE_LIMIT = ERROR_MESSAGE_LIMIT
"""Characters kept of an error message when a Tool sets no ``errorMessageLimit``."""

TRUNCATION_SUFFIX = "... (truncated)"


def truncate_error_message(message: str, limit: int = DEFAULT_ERROR_MESSAGE_LIMIT) -> str:
    """Cut ``message`` to at most ``limit`` characters.

    A message over the limit keeps ``limit - 15`` characters and ends with
    ``... (truncated)``, so the result is exactly ``limit`` long. A limit too small to hold the
    suffix falls back to a plain slice.
    """
    if len(message) <= limit:
        return message
    if limit <= len(TRUNCATION_SUFFIX):
        return message[: max(limit, 0)]
    return message[: limit - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolErrorInfo:
    """The ``error`` part of a failed tool result, as the model sees it."""

    message: str
    """Human-readable cause, already cut to the Tool's ``errorMessageLimit``."""
    name: str | None = None
    """Error type name, for example ``ToolInputValidationError`` or ``FileNotFoundError``."""
    code: str | None = None
    """Machine-readable code, for example ``E_TOOL_NOT_IN_CATALOG``; ``E_TOOL`` by default."""
    suggestion: str | None = None
    """What the model (or the operator) should change to succeed next time."""
    help_url: str | None = None
    """Link to documentation about this error."""

    def to_json(self) -> JsonObject:
        """The wire form with camelCase keys; ``None`` fields are omitted."""
        out: JsonObject = {"message": self.message}
        if self.name is not None:
            out["name"] = self.name
        if self.code is not None:
            out["code"] = self.code
        if self.suggestion is not None:
            out["suggestion"] = self.suggestion
        if self.help_url is not None:
            out["helpUrl"] = self.help_url
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> ToolErrorInfo:
        """Inverse of :meth:`to_json`."""

        def opt(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(
            message=str(data.get("message", "")),
            name=opt("name"),
            code=opt("code"),
            suggestion=opt("suggestion"),
            help_url=opt("helpUrl"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """What one tool execution produced."""

    status: ToolStatus
    """``ok`` (``output`` is set), ``error`` (``error`` is set) or ``pending`` (``handle`` is set)."""
    output: JsonValue = None
    """The handler's return value for ``ok``; an optional acknowledgement for ``pending``."""
    handle: str | None = None
    """Id of work that completes later; only with ``status == "pending"``."""
    error: ToolErrorInfo | None = None
    """Only with ``status == "error"``."""

    def to_json(self) -> JsonObject:
        """The wire form: ``{status, output?, handle?, error?}``."""
        out: JsonObject = {"status": self.status}
        if self.status != "error" or self.output is not None:
            out["output"] = self.output
        if self.handle is not None:
            out["handle"] = self.handle
        if self.error is not None:
            out["error"] = self.error.to_json()
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallResult(ToolResult):
    """A :class:`ToolResult` tied to the call that produced it."""

    tool_call_id: str
    """Matches ``ToolContext.tool_call_id`` and the model's call id."""
    tool_name: str
    """Full tool name, for example ``bash__exec``."""

    def to_json(self) -> JsonObject:
        """The wire form: ``{toolCallId, toolName, status, output?, handle?, error?}``."""
        out: JsonObject = {"toolCallId": self.tool_call_id, "toolName": self.tool_name}
        out.update(ToolResult.to_json(self))
        return out

    @classmethod
    def from_json(cls, data: JsonObject) -> ToolCallResult:
        """Inverse of :meth:`to_json`."""
        status = data.get("status")
        error = data.get("error")
        handle = data.get("handle")
        return cls(
            tool_call_id=str(data.get("toolCallId", "")),
            tool_name=str(data.get("toolName", "")),
            status=status if status in ("ok", "error", "pending") else "error",  # type: ignore[arg-type]
            output=data.get("output"),
            handle=handle if isinstance(handle, str) else None,
            error=ToolErrorInfo.from_json(error) if isinstance(error, dict) else None,
        )


class ToolError(ToolFailure):
    """Raise from a handler to fail the call with a chosen code, suggestion and help link.

    Any other exception fails the call too (code ``E_TOOL``, name = the exception's type); this
    class only lets a handler say more. The runtime never lets either escape to the agent: the
    model receives a ``ToolResult`` with ``status="error"``.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = ToolCode.E_TOOL,
        suggestion: str | None = None,
        help_url: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.suggestion = suggestion
        self.help_url = help_url
        self.name = name or type(self).__name__


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingResult:
    """Return this from a handler to answer now and finish later.

    The call's result becomes ``status="pending"`` with ``handle`` and ``output``. When
    ``completion`` is given, the runtime awaits it in the background and delivers its outcome to
    the conversation as a completion event carrying the same ``handle``.
    """

    handle: str
    """Identifies the background work; the completion event repeats it."""
    output: JsonValue = None
    """An acknowledgement shown to the model now (for example ``{"message": "build started"}``)."""
    completion: Awaitable[JsonValue] | None = None
    """The background work; its value (or exception) becomes the completion's result."""
