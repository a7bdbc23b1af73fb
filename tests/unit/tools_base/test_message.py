"""``Message.data``: the provider-neutral message, derived from the flat fields."""

from __future__ import annotations

from tools_base import Message, MessageSource, ToolCall


def test_text_messages_are_role_and_content() -> None:
    for role in ("system", "user", "assistant"):
        message = Message(id="m", role=role, content="hello")
        assert message.data == {"role": role, "content": "hello"}


def test_assistant_tool_calls_become_parts_after_the_text() -> None:
    message = Message(
        id="m",
        role="assistant",
        content="looking",
        tool_calls=(ToolCall(id="c1", name="bash__exec", args={"command": "ls"}),),
        source=MessageSource(type="assistant", step_id="s"),
    )
    assert message.data == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "looking"},
            {
                "type": "tool-call",
                "toolCallId": "c1",
                "toolName": "bash__exec",
                "args": {"command": "ls"},
            },
        ],
    }


def test_tool_results_carry_call_id_name_and_error_flag() -> None:
    result = {
        "toolCallId": "c1",
        "toolName": "bash__exec",
        "status": "error",
        "error": {"code": "E_TOOL", "message": "x"},
    }
    message = Message(
        id="m",
        role="tool",
        tool_result=result,
        source=MessageSource(type="tool", tool_call_id="c1", tool_name="bash__exec"),
    )
    assert message.data == {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "toolName": "bash__exec",
                "result": result,
                "isError": True,
            }
        ],
    }
    ok = Message(
        id="m", role="tool", tool_result={"toolCallId": "c2", "toolName": "t__x", "status": "ok"}
    )
    part = ok.data["content"][0]  # type: ignore[index]
    assert part["toolCallId"] == "c2"  # falls back to the result's own ids
    assert "isError" not in part


def test_a_parse_failure_survives_the_conversation_file_beside_the_arguments() -> None:
    call = ToolCall(id="c1", name="bash__exec", args={}, malformed_arguments="{not json")
    assert call.to_json() == {
        "id": "c1",
        "name": "bash__exec",
        "args": {},
        "malformedArguments": "{not json",
    }
    assert ToolCall.from_json(call.to_json()) == call
    parsed = ToolCall(id="c2", name="bash__exec", args={"command": "ls"})
    assert "malformedArguments" not in parsed.to_json()  # the wire of a parsed call is as before
    assert ToolCall.from_json(parsed.to_json()) == parsed
