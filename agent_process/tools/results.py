"""The results of tool calls that did not run, or failed: one builder per refusal.

The executor refuses what the tool system decides (not in the catalog, invalid arguments, a
handler that raised or ran out of time); the Step refuses what the Turn decides (cancelled, past
the per-response limit, rejected or left undecided by an operator). Both build their results
here, so each error's code, name and wording has one home, and the Step does not reach into the
executor for them.
"""

from __future__ import annotations

from goondan.errors import HELP_URL, TOOL, ToolCode
from goondan.time import utc_timestamp
from tools_base import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    ToolCall,
    ToolCallResult,
    ToolError,
    ToolErrorInfo,
    truncate_error_message,
)

TOOL_FAILURE_SUGGESTION = TOOL.suggestion(ToolCode.E_TOOL)
"""The suggestion of a generic ``E_TOOL`` error whose exception names none."""


ERROR_NAMES: dict[str, str] = {
    ToolCode.E_TOOL_MIDDLEWARE: "MiddlewareResultError",
    ToolCode.E_TOOL_NOT_IN_CATALOG: "ToolNotInCatalogError",
    ToolCode.E_TOOL_NOT_FOUND: "ToolNotFoundError",
    ToolCode.E_TOOL_INVALID_ARGS: "ToolInputValidationError",
    ToolCode.E_TOOL_TIMEOUT: "ToolTimeoutError",
    ToolCode.E_TOOL_BUSY: "ToolBusyError",
    ToolCode.E_TOOL_TOO_MANY_PENDING: "ToolLimitError",
    ToolCode.E_TOOL_CALL_LIMIT: "ToolLimitError",
    ToolCode.E_TOOL_CANCELLED: "ToolCancelledError",
    ToolCode.E_TOOL_REJECTED: "ToolRejectedError",
    ToolCode.E_TOOL_APPROVAL_TIMEOUT: "ToolApprovalTimeoutError",
    ToolCode.E_TOOL_INTERRUPTED: "ToolInterruptedError",
}
"""The error name (``error.name``) of each code the runtime itself answers a call with."""


# Eight parameters: one per field of the error a call gets, all keyword-only past the first two.
def error_result(
    call_id: str,
    tool_name: str,
    *,
    message: str,
    code: str,
    name: str | None = None,
    suggestion: str | None = None,
    help_url: str | None = None,
    limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
) -> ToolCallResult:
    """The one way this package builds an error result: message cut to ``limit``, ``name``
    by default the code's in :data:`ERROR_NAMES`."""
    return ToolCallResult(
        tool_call_id=call_id,
        tool_name=tool_name,
        status="error",
        error=ToolErrorInfo(
            message=truncate_error_message(message, limit),
            name=name if name is not None else ERROR_NAMES[code],
            code=code,
            suggestion=suggestion,
            help_url=help_url or HELP_URL.format(code=code),
        ),
    )


def exception_result(
    call_id: str,
    tool_name: str,
    exc: BaseException,
    *,
    default_code: str = ToolCode.E_TOOL,
    limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
) -> ToolCallResult:
    """Turn an exception into an error result, keeping a ``code``/``suggestion`` it carries."""
    # SystemExit.code is the exit status, not an error code.
    code = None if isinstance(exc, SystemExit) else getattr(exc, "code", None)
    code = code if isinstance(code, str) and code else default_code
    suggestion = getattr(exc, "suggestion", None)
    if not isinstance(suggestion, str):
        suggestion = TOOL_FAILURE_SUGGESTION if code == ToolCode.E_TOOL else None
    help_url = getattr(exc, "help_url", None)
    name = exc.name if isinstance(exc, ToolError) else type(exc).__name__
    message = str(exc)
    if isinstance(exc, SystemExit):  # sys.exit(3) reads better as what it was than as "3"
        message = f"the tool called sys.exit({exc.code!r})"
    elif isinstance(exc, MemoryError) and not message:
        message = "out of memory (the agent's limits.memoryMiB, or the host's memory)"
    return error_result(
        call_id,
        tool_name,
        message=message or "Unknown tool execution error",
        code=code,
        name=name,
        suggestion=suggestion,
        help_url=help_url if isinstance(help_url, str) else None,
        limit=limit,
    )


# -- what the Step refuses: every call still gets its result (providers refuse one unanswered)


def _step_refusal(
    call: ToolCall, code: str, message: str, suggestion: str | None = None
) -> ToolCallResult:
    """The result of ``call`` refused by the Step with ``code``: the catalogue's suggestion for
    the code unless the refusal has a more precise one."""
    return error_result(
        call.id,
        call.name,
        message=message,
        code=code,
        suggestion=suggestion if suggestion is not None else TOOL.suggestion(code),
    )


def cancelled(call: ToolCall, reason: str | None) -> ToolCallResult:
    """A call not run because its request was cancelled."""
    return _step_refusal(
        call, ToolCode.E_TOOL_CANCELLED, f"Not run: the request was cancelled ({reason})."
    )


def over_limit(call: ToolCall, limit: int, made: int) -> ToolCallResult:
    """A call past the ``limit`` calls one response may make (it made ``made``)."""
    return _step_refusal(
        call,
        ToolCode.E_TOOL_CALL_LIMIT,
        f"Not run: one response may make at most {limit} tool calls (this one made {made}).",
        suggestion=f"Make at most {limit} calls per response.",
    )


def rejected(call: ToolCall, reason: str | None) -> ToolCallResult:
    """A call an operator rejected."""
    return _step_refusal(
        call,
        ToolCode.E_TOOL_REJECTED,
        f"An operator rejected this call of {call.name!r}: {reason or 'no reason given'}",
    )


def approval_expired(call: ToolCall, expires_at_unix: float) -> ToolCallResult:
    """A call that needed an operator's approval and got no decision in time."""
    return _step_refusal(
        call,
        ToolCode.E_TOOL_APPROVAL_TIMEOUT,
        f"This call of {call.name!r} needed an operator's approval and got no decision "
        f"by {utc_timestamp(expires_at_unix)}; it did not run.",
    )


def interrupted(call: ToolCall) -> ToolCallResult:
    """An approved call the agent process stopped during: it may or may not have run."""
    return _step_refusal(
        call,
        ToolCode.E_TOOL_INTERRUPTED,
        "The agent process stopped while this approved call ran; it may or may not have run.",
    )
