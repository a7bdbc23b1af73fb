"""The one builder of a conversation's ``tool`` message (a Step's results and a Turn's
interrupted calls both go through it)."""

from __future__ import annotations

from agent_process.step import tool_message
from goondan.time import parse_timestamp
from tools_base import ToolCall, ToolCallResult


def test_carries_the_result_and_names_the_call() -> None:
    call = ToolCall(id="call-1", name="bash__exec", args={"cmd": "true"})
    result = ToolCallResult(tool_call_id="call-1", tool_name="bash__exec", status="ok", output=1)
    message = tool_message(call, result, {"note": "x"})
    assert message.role == "tool"
    assert message.tool_result == result.to_json()
    assert (message.source.type, message.source.tool_call_id, message.source.tool_name) == (
        "tool",
        "call-1",
        "bash__exec",
    )
    assert message.metadata == {"note": "x"}
    parse_timestamp(message.created_at)
    assert message.data["content"][0]["toolCallId"] == "call-1"  # type: ignore[index,call-overload]


def test_ids_differ_and_metadata_is_never_shared() -> None:
    call = ToolCall(id="c", name="t", args={})
    result = ToolCallResult(tool_call_id="c", tool_name="t", status="ok")
    first, second = tool_message(call, result), tool_message(call, result)
    assert first.id != second.id
    first.metadata["k"] = 1
    assert second.metadata == {}
