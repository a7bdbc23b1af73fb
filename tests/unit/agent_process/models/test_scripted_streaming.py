"""The scripted model streams its replies in the chunks its script asks for, and a Turn streams
only when its caller does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.models.base import ModelRequest
from agent_process.models.scripted import ScriptedModel
from agent_process.scope import TextSink
from agent_process.step import StepSettings
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from bundle.scripted import ScriptSpec, ScriptStream
from tools_base import Message


@pytest.mark.parametrize(
    ("stream", "text", "chunks"),
    [
        ({}, "hello big world", ["hello ", "big ", "world"]),
        ({"by": "word", "size": 2}, "hello big  world", ["hello big  ", "world"]),
        ({}, "  lead and trail  ", ["  lead ", "and ", "trail  "]),
        ({"by": "chars", "size": 4}, "abcdefghij", ["abcd", "efgh", "ij"]),
        ({"by": "chars", "size": 100}, "short", ["short"]),
        ({}, "   ", ["   "]),
        ({}, "", []),
    ],
)
def test_a_reply_is_split_as_asked_and_the_chunks_are_the_reply(
    stream: dict[str, Any], text: str, chunks: list[str]
) -> None:
    split = ScriptStream.model_validate(stream).split(text)
    assert split == chunks
    assert "".join(split) == text


def test_a_chunk_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size"):
        ScriptSpec.model_validate({"stream": {"size": 0}, "rules": [{"reply": "x"}]})


def scripted(script: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(ScriptSpec.model_validate(script), agent_name="talker")


HELLO = [Message(id="u", role="user", content="hi")]


async def test_a_streaming_caller_gets_the_reply_in_chunks_and_the_same_response() -> None:
    model = scripted({"rules": [{"reply": "one two three"}]})
    whole = await model.complete(ModelRequest(messages=HELLO, tools=[]))
    chunks: list[str] = []
    streamed = await model.complete(ModelRequest(messages=HELLO, tools=[], on_text=chunks.append))
    assert chunks == ["one ", "two ", "three"]
    assert streamed == whole


async def test_a_rules_stream_overrides_the_scripts() -> None:
    model = scripted(
        {
            "stream": {"by": "chars", "size": 2},
            "rules": [
                {"when": {"input": "^whole$"}, "reply": "all at once", "stream": {"size": 99}},
                {"reply": "abcde"},
            ],
        }
    )
    chunks: list[str] = []
    await model.complete(ModelRequest(messages=HELLO, tools=[], on_text=chunks.append))
    assert chunks == ["ab", "cd", "e"]
    chunks.clear()
    whole = [Message(id="u", role="user", content="whole")]
    await model.complete(ModelRequest(messages=whole, tools=[], on_text=chunks.append))
    assert chunks == ["all at once"]


def turn_runner(
    rules: list[dict[str, Any]], sinks: list[tuple[str, TurnInput]]
) -> tuple[TurnRunner, list[tuple[str, str]]]:
    """A runner whose Turns stream into the returned list, each sink it builds noted."""
    registry = ToolRegistry()
    pipeline = MiddlewarePipeline()
    settings = StepSettings(
        agent_name="talker",
        model=scripted({"rules": rules}),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=(),
    )
    streamed: list[tuple[str, str]] = []

    def text_sink(instance_key: str, turn_id: str, turn_input: TurnInput) -> TextSink:
        sinks.append((turn_id, turn_input))
        return lambda step_id, text: streamed.append((step_id, text))

    return TurnRunner(settings, text_sinks=text_sink), streamed


async def test_a_turn_streams_only_when_its_caller_does(tmp_path: Path) -> None:
    asked: list[tuple[str, TurnInput]] = []
    runner, streamed = turn_runner([{"reply": "fine thanks"}], asked)
    store = ConversationStore(tmp_path / "conversation")
    quiet = await runner.run("default", store, tmp_path, TurnInput(text="hi"))
    assert (quiet.status, asked) == ("ok", [])  # no stream asked: no sink built at all
    loud = await runner.run("default", store, tmp_path, TurnInput(text="hi", stream_id="s1"))
    assert loud.text == quiet.text == "fine thanks"
    [(turn_id, turn_input)] = asked
    assert (turn_id, turn_input.stream_id) == (loud.turn_id, "s1")
    step = f"{loud.turn_id}-step-0"
    assert streamed == [(step, "fine "), (step, "thanks")]
