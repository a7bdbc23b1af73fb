"""The cassette at the provider seam: a recorded call replays to the same answer, streamed
pieces included; what the runtime generates is masked when requests are compared; a request
with no recorded answer fails with a diff against the closest recorded one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Literal

import pytest

from agent_process.models.base import ModelCallError, ModelRequest, ModelResponse
from agent_process.models.cassette import CassetteModel, masked, read_cassette, request_key
from agent_process.models.scripted import ScriptedModel
from agent_process.tools.catalog import ToolCatalogItem
from bundle.cassette_plan import CassettePlan
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, Message

RULES = [
    {"when": {"input": "^hello"}, "reply": "hi there, friend"},
    {"reply": "pardon?"},
]
TOOLS = [
    ToolCatalogItem(
        name="notes__write",
        description="Write a note.",
        parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    )
]


def conversation(system: str, user: str, tool_result: JsonObject | None = None) -> list[Message]:
    messages = [
        Message(id="m1", role="system", content=system, created_at="2026-01-01T00:00:00Z"),
        Message(id="m2", role="user", content=user, created_at="2026-01-01T00:00:01Z"),
    ]
    if tool_result is not None:
        messages.append(Message(id="m3", role="tool", tool_result=tool_result))
    return messages


def scripted() -> ScriptedModel:
    return ScriptedModel(ScriptSpec.model_validate({"rules": RULES}), agent_name="greeter")


def cassette(tmp_path: Path, mode: Literal["record", "replay"]) -> CassetteModel:
    plan = CassettePlan(
        mode=mode, path=str(tmp_path / "case.yaml"), work_dir=str(tmp_path / "work")
    )
    return CassetteModel(plan, "greeter", scripted)


def gather(tmp_path: Path) -> None:
    """What the runner does after a recording: the agents' files as the case's cassette."""
    (tmp_path / "case.yaml").write_text((tmp_path / "work" / "greeter.yaml").read_text())


def test_a_recorded_call_replays_with_its_streamed_pieces(tmp_path: Path) -> None:
    heard: list[str] = []
    request = ModelRequest(
        messages=conversation("Be kind.", "hello"),
        tools=TOOLS,
        on_text=heard.append,
        conversation="chat-1",
    )
    recorded = asyncio.run(cassette(tmp_path, "record").complete(request))
    gather(tmp_path)
    [entry] = read_cassette(tmp_path / "case.yaml")
    assert (entry["agent"], entry["conversation"], entry["step"]) == ("greeter", "chat-1", 1)
    assert entry["response"]["chunks"] == heard  # type: ignore[index]
    assert "\n    content: Be kind.\n" in (tmp_path / "case.yaml").read_text()

    replayed: list[str] = []
    again = ModelRequest(
        messages=conversation("Be kind.", "hello"), tools=TOOLS, on_text=replayed.append
    )
    answer = asyncio.run(cassette(tmp_path, "replay").complete(again))
    assert (answer.text, answer.tool_calls, answer.finish_reason) == (
        recorded.text,
        recorded.tool_calls,
        recorded.finish_reason,
    )
    assert replayed == heard
    assert not (tmp_path / "work" / "misses").exists()


def test_replay_never_builds_the_provider(tmp_path: Path) -> None:
    built: list[str] = []

    def provider() -> ScriptedModel:
        built.append("built")
        return scripted()

    plan = CassettePlan(mode="replay", path=str(tmp_path / "none.yaml"), work_dir=str(tmp_path))
    model = CassetteModel(plan, "greeter", provider)
    with pytest.raises(ModelCallError, match="record the case"):
        asyncio.run(model.complete(ModelRequest(messages=conversation("x", "y"), tools=[])))
    assert built == []


def test_generated_ids_and_times_are_masked_and_tool_results_ordered() -> None:
    def document(correlation: str, when: str, first: str, second: str) -> JsonObject:
        def result(call: str) -> JsonObject:
            return {"role": "tool", "content": [{"toolCallId": call}]}

        return {
            "messages": [
                {"role": "user", "content": f"at {when}"},
                result(first),
                result(second),
                {"role": "assistant", "content": f"requestId={correlation}"},
            ]
        }

    one = document("corr_0123456789abcdef01234567", "2026-01-01T10:00:00.123Z", "a", "b")
    two = document("corr_fedcba9876543210fedcba98", "2027-05-05T11:11:11Z", "b", "a")
    assert request_key(one) == request_key(two)
    assert "corr_<id>" in str(masked(one))
    assert request_key(one) != request_key(document("corr_00", "now", "a", "b"))


def test_a_changed_prompt_misses_with_the_changed_line(tmp_path: Path) -> None:
    system = "You are terse.\nAnswer in English.\nNever apologise."
    asyncio.run(
        cassette(tmp_path, "record").complete(
            ModelRequest(messages=conversation(system, "hello"), tools=TOOLS)
        )
    )
    gather(tmp_path)
    changed = system.replace("Answer in English.", "Answer in French.")
    with pytest.raises(ModelCallError) as caught:
        asyncio.run(
            cassette(tmp_path, "replay").complete(
                ModelRequest(messages=conversation(changed, "hello"), tools=TOOLS)
            )
        )
    message = str(caught.value)
    assert "no recorded model call of agent 'greeter'" in message
    assert "\n-    Answer in English.\n+    Answer in French.\n" in message
    assert "Never apologise" in message  # context around the change
    [miss] = list((tmp_path / "work" / "misses").iterdir())
    assert miss.read_text().rstrip("\n") == message


def test_a_changed_tool_schema_misses_with_the_changed_line(tmp_path: Path) -> None:
    asyncio.run(
        cassette(tmp_path, "record").complete(
            ModelRequest(messages=conversation("s", "hello"), tools=TOOLS)
        )
    )
    gather(tmp_path)
    renamed = [
        ToolCatalogItem(
            name="notes__write",
            description="Write a note.",
            parameters={"type": "object", "properties": {"body": {"type": "string"}}},
        )
    ]
    with pytest.raises(ModelCallError) as caught:
        asyncio.run(
            cassette(tmp_path, "replay").complete(
                ModelRequest(messages=conversation("s", "hello"), tools=renamed)
            )
        )
    assert "\n-      text:\n+      body:\n" in str(caught.value)


def test_recorded_answers_are_returned_as_they_were(tmp_path: Path) -> None:
    request = ModelRequest(messages=conversation("s", "something else"), tools=[])
    first: ModelResponse = asyncio.run(cassette(tmp_path, "record").complete(request))
    gather(tmp_path)
    model = cassette(tmp_path, "replay")
    answers = [asyncio.run(model.complete(request)) for _ in range(3)]
    assert {a.text for a in answers} == {first.text} == {"pardon?"}


def test_an_unreadable_cassette_fails_each_call_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "case.yaml").write_text("agent: [unclosed\n")
    model = cassette(tmp_path, "replay")  # the agent still boots
    with pytest.raises(ModelCallError, match=r"the cassette .*case\.yaml cannot be read"):
        asyncio.run(model.complete(ModelRequest(messages=conversation("s", "hi"), tools=[])))
