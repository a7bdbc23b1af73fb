"""The base extensions of @goondan/base, each in a real Turn loop with the offline model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent_process.extensions import ExtensionLoadError
from tests.support.extensions import ExtensionHarness, base_extension
from tools_base import Message, MessageSource, ToolCall

ECHO_RULES: list[dict[str, Any]] = [
    {"when": {"input": "^tool (?P<w>.+)$"}, "call": {"tool": "echo__say", "args": {"w": "{w}"}}},
    {"when": {"status": "ok"}, "reply": "said {result}"},
    {"reply": "heard {input}"},
]


def say(ctx: object, args: dict[str, Any]) -> Any:
    return args.get("w", "")


def assert_valid(messages: list[Message]) -> None:
    """Every tool result follows its call, and every call has its result."""
    calls = {c.id for m in messages for c in m.tool_calls}
    results = {m.source.tool_call_id for m in messages if m.role == "tool"}
    assert calls == results
    for index, message in enumerate(messages):
        if message.role == "tool":
            earlier = {c.id for m in messages[:index] for c in m.tool_calls}
            assert message.source.tool_call_id in earlier


# -- message-window -------------------------------------------------------------------------


async def test_the_window_keeps_the_newest_messages_and_the_conversation_valid(
    tmp_path: Path,
) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=ECHO_RULES,
        extensions=[base_extension("message-window", maxMessages=5)],
        tools={"echo__say": say},
        system_prompt="You echo.",
    )
    pinned = Message(id="pin", role="user", content="remember me", metadata={"pinned": True})
    harness.store.append(pinned)
    for i in range(6):
        await harness.turn(f"tool w{i}")
        await harness.turn(f"plain {i}")
    messages = harness.messages
    assert messages[0].role == "system"
    assert messages[0].content == "You echo."
    assert "pin" in [m.id for m in messages]
    # the window applies before each Turn: at most 5 + the Turn's own additions
    assert len([m for m in messages if m.role != "system"]) <= 5 + 2
    assert messages[-2].content == "plain 5"
    assert_valid(messages)
    await harness.close()


def conversation_with_a_tool_call() -> list[Message]:
    call = ToolCall(id="c1", name="echo__say", args={})
    return [
        Message(id="sys", role="system", content="prompt", source=MessageSource(type="system")),
        Message(id="u1", role="user", content="first"),
        Message(id="a1", role="assistant", tool_calls=(call,)),
        Message(
            id="t1",
            role="tool",
            tool_result={"status": "ok"},
            source=MessageSource(type="tool", tool_call_id="c1", tool_name="echo__say"),
        ),
        Message(id="a2", role="assistant", content="done"),
        Message(id="u2", role="user", content="second"),
    ]


def test_a_call_and_its_result_leave_the_window_together() -> None:
    from tools_base.extensions.message_window import messages_outside_window

    messages = conversation_with_a_tool_call()
    # two over the limit: cutting after "a1" would orphan "t1", so the pair goes as one
    assert [m.id for m in messages_outside_window(messages, 3)] == ["u1", "a1", "t1"]
    assert [m.id for m in messages_outside_window(messages, 5)] == []
    # the system prompt is not counted, and the last message is never removed
    assert [m.id for m in messages_outside_window(messages, 1)] == ["u1", "a1", "t1", "a2"]


def test_compaction_never_splits_a_call_from_its_result() -> None:
    from tools_base.extensions.message_compaction import plan_compaction

    messages = conversation_with_a_tool_call()
    plan = plan_compaction(messages, 3, 10_000, 1, "remove")
    assert [m.id for m in plan.removed] == ["u1", "a1", "t1"]
    truncated = plan_compaction(messages, 1, 10_000, 2, "truncate")
    assert truncated.truncate
    assert [m.id for m in truncated.kept] == ["sys", "a2", "u2"]


async def test_the_window_refuses_a_bad_limit(tmp_path: Path) -> None:
    with pytest.raises(ExtensionLoadError, match="maxMessages"):
        await ExtensionHarness.start(
            tmp_path, rules=ECHO_RULES, extensions=[base_extension("message-window", maxMessages=0)]
        )


# -- message-compaction ---------------------------------------------------------------------


async def test_compaction_removes_old_messages_and_records_a_summary(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=ECHO_RULES,
        extensions=[base_extension("message-compaction", maxMessages=6, retainLastMessages=2)],
        tools={"echo__say": say},
        system_prompt="You echo.",
    )
    for i in range(5):
        await harness.turn(f"tool w{i}")
    messages = harness.messages
    summaries = [m for m in messages if m.source.type == "extension"]
    assert summaries
    assert summaries[-1].role == "system"
    assert summaries[-1].content.startswith("[message-compaction] mode=remove removed=")
    assert summaries[-1].metadata["compaction.removed"] > 0  # type: ignore[operator]
    assert messages[0].content == "You echo."
    assert messages[-1].content == "said w4"
    assert_valid(messages)
    await harness.close()


async def test_compaction_in_truncate_mode_keeps_only_the_prompt_and_the_tail(
    tmp_path: Path,
) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=ECHO_RULES,
        extensions=[
            base_extension(
                "message-compaction",
                maxCharacters=10,
                retainLastMessages=1,
                mode="truncate",
                appendSummary=False,
            )
        ],
        system_prompt="You echo.",
    )
    for i in range(3):
        await harness.turn(f"a long enough message number {i}")
    messages = harness.messages
    # before the last Turn only the prompt and its user message remained; then the answer
    assert [m.role for m in messages] == ["system", "user", "assistant"]
    assert messages[1].content == "a long enough message number 2"
    await harness.close()


# -- logging ------------------------------------------------------------------------------


async def test_logging_writes_a_line_per_turn_step_and_call(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=ECHO_RULES,
        extensions=[base_extension("logging", includeToolArgs=True)],
        tools={"echo__say": say},
    )
    with capture_logs() as logs:
        await harness.turn("tool hi")
    events = [(e["event"], e["log_level"]) for e in logs if e.get("extension") == "logging"]
    assert events == [
        ("turn started", "info"),
        ("step started", "info"),
        ("tool call", "debug"),
        ("step completed", "info"),
        ("step started", "info"),
        ("step completed", "info"),
        ("turn completed", "info"),
    ]
    [call] = [e for e in logs if e["event"] == "tool call"]
    assert (call["tool"], call["status"], call["args"]) == ("echo__say", "ok", {"w": "hi"})
    [done] = [e for e in logs if e["event"] == "turn completed"]
    assert (done["status"], done["steps"]) == ("ok", 2)
    await harness.close()


# -- tool-search --------------------------------------------------------------------------

SEARCH_RULES: list[dict[str, Any]] = [
    {
        "when": {"input": "^find (?P<q>\\S+)$"},
        "call": {"tool": "tool-search__search", "args": {"query": "{q}"}},
    },
    {"when": {"input": "^beta$"}, "call": {"tool": "b__beta"}},
    {"when": {"toolResult": "tool-search__search", "status": "ok"}, "call": {"tool": "b__beta"}},
    {"when": {"status": "ok"}, "reply": "ok {result}"},
    {"when": {"status": "error"}, "reply": "error {errorCode}"},
]


async def test_tool_search_narrows_the_catalog_and_selects_what_it_found(tmp_path: Path) -> None:
    tools = {"a__alpha": say, "b__beta": lambda ctx, args: "beta ran", "c__gamma": say}
    plan = base_extension("tool-search")
    harness = await ExtensionHarness.start(
        tmp_path, rules=SEARCH_RULES, extensions=[plan], tools=tools
    )
    assert (await harness.turn("beta")).text == "error E_TOOL_NOT_IN_CATALOG"
    assert (await harness.turn("find BETA")).text == "ok beta ran"
    [found] = [
        m.tool_result for m in harness.messages if m.source.tool_name == "tool-search__search"
    ]
    assert found is not None
    assert found["output"]["selected"] == ["b__beta"]  # type: ignore[index]
    await harness.close()
    # the selection is the conversation's state: it survives a new process
    again = await ExtensionHarness.start(
        tmp_path, rules=SEARCH_RULES, extensions=[plan], tools=tools
    )
    assert (await again.turn("beta")).text == "ok beta ran"
    state = json.loads((again.state_directory / "tool-search.json").read_text())
    assert state["selected"] == ["b__beta"]
    await again.close()


async def test_tool_search_refuses_a_short_query(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=SEARCH_RULES,
        extensions=[base_extension("tool-search", minQueryLength=3)],
        tools={"b__beta": say},
    )
    assert (await harness.turn("find be")).text == "error E_TOOL_SEARCH_QUERY"
    await harness.close()


# -- required-tools-guard -----------------------------------------------------------------

GUARD_RULES: list[dict[str, Any]] = [
    {"when": {"input": "^You must call"}, "call": {"tool": "t__must"}},
    {"when": {"toolResult": "t__must"}, "reply": "finally"},
    {"reply": "done without it"},
]


async def test_the_guard_continues_the_turn_until_a_required_tool_succeeded(
    tmp_path: Path,
) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=GUARD_RULES,
        extensions=[base_extension("required-tools-guard", requiredTools=["t__must"])],
        tools={"t__must": lambda ctx, args: "ok"},
    )
    first = await harness.turn("answer")
    assert (first.text, first.step_count) == ("finally", 3)
    second = await harness.turn("answer again")  # the first Turn's success does not count
    assert (second.text, second.step_count) == ("finally", 3)
    reminders = [m for m in harness.messages if m.source.type == "extension"]
    assert len(reminders) == 2
    assert reminders[0].content == "You must call one of these tools before answering: t__must"
    await harness.close()


async def test_the_guard_is_bounded_by_the_step_limit(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "never calling it"}],
        extensions=[base_extension("required-tools-guard", errorMessage="Call t__must.")],
        tools={"t__must": say},
        required_tools=["t__must"],
        max_steps=3,
    )
    result = await harness.turn("answer")
    assert (result.status, result.finish_reason) == ("ok", "max_steps")
    assert result.text == (
        "never calling it\n\nStopped at maxStepsPerTurn (3) before any required tool "
        "succeeded (at least one of: t__must)."
    )
    assert [m.content for m in harness.messages if m.source.type == "extension"] == [
        "Call t__must."
    ] * 3
    await harness.close()


# -- inter-agent-response-format ----------------------------------------------------------


def inbox(kind: str, payload: dict[str, Any]) -> Message:
    return Message(
        id=f"inbox-{kind}",
        role="user",
        content=json.dumps(payload),
        source=MessageSource(type="system"),
        metadata={"__goondanInbox": kind},
    )


async def test_inbox_reports_become_readable_text(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "noted"}],
        extensions=[base_extension("inter-agent-response-format")],
    )
    harness.store.append(
        inbox(
            "inter_agent_response",
            {
                "type": "inter_agent_response",
                "requestId": "corr_1",
                "fromAgentId": "researcher",
                "toAgentId": "tester",
                "status": "ok",
                "response": "42 papers",
            },
        )
    )
    harness.store.append(
        inbox(
            "send_failed",
            {
                "type": "send_failed",
                "eventId": "ev_9",
                "target": "writer",
                "error": {"code": "AGENT_CRASHED", "message": "agent 'writer' exited"},
            },
        )
    )
    harness.store.append(
        Message(
            id="junk", role="user", content="not json", metadata={"__goondanInbox": "send_failed"}
        )
    )
    await harness.turn("go on")
    by_id = {m.id: m for m in harness.messages}
    assert by_id["inbox-inter_agent_response"].content == (
        "[inter-agent response] researcher -> tester status=ok requestId=corr_1\n42 papers"
    )
    assert by_id["inbox-send_failed"].content == (
        "[inter-agent send failed] -> writer eventId=ev_9\n"
        "error(AGENT_CRASHED): agent 'writer' exited"
    )
    assert by_id["inbox-send_failed"].metadata["__goondanInterAgentResponseFormatted"] is True
    assert by_id["junk"].content == "not json"
    await harness.close()


async def test_an_answer_is_read_from_upstreams_metadata(tmp_path: Path) -> None:
    """What upstream's agent runner writes: the metadata says what the content may not."""
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "noted"}],
        extensions=[base_extension("inter-agent-response-format", includeRequestMetadata=True)],
    )
    about = {
        "kind": "inter_agent_response",
        "version": 1,
        "requestId": "corr_2",
        "requestEventId": "agent_event_1",
        "fromAgentId": "researcher",
        "toAgentId": "tester",
        "async": True,
        "status": "timeout",
        "receivedAt": "2026-01-31T12:00:00.000Z",
        "traceId": "t" * 32,
        "requestMetadata": {"topic": "papers"},
        "errorCode": "AGENT_REQUEST_TIMEOUT",
        "errorMessage": "no answer within 60000 ms",
    }
    harness.store.append(
        Message(
            id="late",
            role="user",
            content=json.dumps({"type": "inter_agent_response", "requestId": "corr_2"}),
            source=MessageSource(type="user"),
            metadata={"__goondanInterAgentResponse": about},
        )
    )
    await harness.turn("go on")
    [late] = [m for m in harness.messages if m.id == "late"]
    assert late.content == (
        "[inter-agent response] researcher -> tester status=timeout requestId=corr_2\n"
        "eventId=agent_event_1\n"
        f"traceId={'t' * 32}\n"
        "error(AGENT_REQUEST_TIMEOUT): no answer within 60000 ms\n"
        'requestMetadata={\n  "topic": "papers"\n}'
    )
    assert late.metadata["__goondanInterAgentResponse"] == about  # kept for extensions
    await harness.close()


# -- context-message ----------------------------------------------------------------------


async def test_the_inbound_context_shows_a_connector_events_properties(tmp_path: Path) -> None:
    from agent_process.turn import TurnInput

    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "ok"}],
        extensions=[base_extension("context-message", includeInboundContext=True)],
    )
    event = TurnInput(
        text="hello bot",
        event_type="telegram_message",
        source_kind="connector",
        source_name="connection:tg",
        metadata={"properties": {"chat_id": "42", "connection_name": "tg"}},
    )
    await harness.turn("hello bot", event)
    [context] = [m for m in harness.messages if "__goondanContextMessage" in m.metadata]
    assert context.content == (
        "[runtime_inbound]\nsource: connector connection:tg\nevent: telegram_message\n"
        "chat_id: 42\nconnection_name: tg"
    )
    await harness.close()


async def test_the_context_message_is_added_once_while_it_does_not_change(
    tmp_path: Path,
) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "ok"}],
        extensions=[base_extension("context-message", includeSwarmCatalog=True)],
        system_prompt="You are the tester.",
    )
    await harness.turn("one")
    await harness.turn("two")
    contexts = [m for m in harness.messages if "__goondanContextMessage" in m.metadata]
    assert len(contexts) == 1
    assert contexts[0].role == "system"
    assert contexts[0].content.startswith("[runtime_catalog]\nswarm: default\nself: tester")
    assert "You are the tester." not in contexts[0].content  # the runtime already sends it
    await harness.close()
