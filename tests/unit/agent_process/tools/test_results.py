"""The results of calls the Step refuses: each error's code names it (``ERROR_NAMES``)."""

from __future__ import annotations

import pytest

from agent_process.tools import results
from agent_process.tools.results import ERROR_NAMES, error_result
from goondan.errors import ToolCode
from tools_base import ToolCall, ToolCallResult

CALL = ToolCall(id="c1", name="echo__say", args={})


@pytest.mark.parametrize(
    ("result", "code", "name"),
    [
        (results.cancelled(CALL, "stop"), ToolCode.E_TOOL_CANCELLED, "ToolCancelledError"),
        (results.over_limit(CALL, 2, 3), ToolCode.E_TOOL_CALL_LIMIT, "ToolLimitError"),
        (results.rejected(CALL, None), ToolCode.E_TOOL_REJECTED, "ToolRejectedError"),
        (
            results.approval_expired(CALL, 0.0),
            ToolCode.E_TOOL_APPROVAL_TIMEOUT,
            "ToolApprovalTimeoutError",
        ),
        (results.interrupted(CALL), ToolCode.E_TOOL_INTERRUPTED, "ToolInterruptedError"),
    ],
)
def test_each_refusal_is_named_after_its_code(result: ToolCallResult, code: str, name: str) -> None:
    assert (result.tool_call_id, result.tool_name, result.status) == ("c1", "echo__say", "error")
    assert result.error is not None
    assert (result.error.code, result.error.name) == (code, name)
    assert result.error.help_url is not None
    assert code in result.error.help_url


def test_a_name_given_wins_over_the_codes() -> None:
    result = error_result("c1", "t", message="m", code=ToolCode.E_TOOL_BUSY, name="Mine")
    assert result.error is not None
    assert result.error.name == "Mine"
    assert ERROR_NAMES[ToolCode.E_TOOL_BUSY] == "ToolBusyError"
