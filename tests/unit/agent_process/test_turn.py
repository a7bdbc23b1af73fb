"""The Turn/Step loop in-process: scripted model, real executor, real conversation files."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepResult, StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline, StepMiddlewareContext
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, ToolContext


def upper(ctx: ToolContext, args: JsonObject) -> JsonObject:
    return {"text": str(args["text"]).upper(), "workdir": str(ctx.workdir)}


def runner(
    tmp_path: Path, rules: list[dict[str, Any]], max_steps: int = 8
) -> tuple[TurnRunner, MiddlewarePipeline]:
    registry = ToolRegistry()
    registry.register(
        ToolCatalogItem(
            name="text__upper",
            parameters={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
            source=ToolSource(type="config", name="text"),
        ),
        upper,
    )
    pipeline = MiddlewarePipeline()
    settings = StepSettings(
        agent_name="shouter",
        model=ScriptedModel(ScriptSpec.model_validate({"rules": rules}), agent_name="shouter"),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=("text__upper",),
        system_prompt="You shout.",
    )
    return TurnRunner(settings, max_steps=max_steps), pipeline


RULES: list[dict[str, Any]] = [
    {
        "when": {"input": "^shout (?P<words>.+)$"},
        "call": {"tool": "text__upper", "args": {"text": "{words}"}},
    },
    {"when": {"toolResult": "text__upper", "status": "ok"}, "reply": "{result.text}!"},
    {"when": {"toolResult": "text__upper"}, "reply": "failed: {error}"},
    {"reply": "say: shout <words>"},
]


async def test_a_turn_calls_a_tool_and_answers(tmp_path: Path) -> None:
    turn_runner, _ = runner(tmp_path, RULES)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="shout hello"))
    assert (result.status, result.text, result.step_count) == ("ok", "HELLO!", 2)
    roles = [m.role for m in ConversationStore(tmp_path / "conv").load()]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]


async def test_the_conversation_carries_over_between_turns(tmp_path: Path) -> None:
    turn_runner, _ = runner(tmp_path, RULES)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    await turn_runner.run("default", store, tmp_path, TurnInput(text="shout a"))
    second = await turn_runner.run("default", store, tmp_path, TurnInput(text="hi"))
    assert second.text == "say: shout <words>"
    messages = ConversationStore(tmp_path / "conv").load()
    assert [m.role for m in messages].count("system") == 1
    assert [m.content for m in messages if m.role == "user"] == ["shout a", "hi"]


async def test_max_steps_answers_with_the_models_last_text(tmp_path: Path) -> None:
    working = [{"reply": "half done", "call": {"tool": "text__upper", "args": {"text": "x"}}}]
    turn_runner, _ = runner(tmp_path, working, max_steps=2)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="go"))
    assert (result.status, result.finish_reason, result.text) == ("ok", "max_steps", "half done")
    assert result.error is None
    assert result.step_count == 2
    wire = result.to_json()
    assert (wire["output"], wire["finishReason"], "error" in wire) == (
        "half done",
        "max_steps",
        False,
    )
    assert not [m for m in store.messages if m.metadata.get("__goondanNotice")]


async def test_max_steps_without_text_answers_the_notice_and_keeps_it(tmp_path: Path) -> None:
    looping = [{"call": {"tool": "text__upper", "args": {"text": "again"}}}]
    turn_runner, _ = runner(tmp_path, looping, max_steps=3)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="go"))
    notice = "Turn stopped: reached maxStepsPerTurn (3) without a final answer."
    assert (result.status, result.finish_reason, result.text) == ("ok", "max_steps", notice)
    assert result.step_count == 3
    last = ConversationStore(tmp_path / "conv").load()[-1]
    assert (last.role, last.content, last.metadata["__goondanNotice"]) == (
        "assistant",
        notice,
        "max_steps",
    )


async def test_on_max_steps_error_fails_the_turn_with_e_max_steps(tmp_path: Path) -> None:
    working = [{"reply": "half done", "call": {"tool": "text__upper", "args": {"text": "x"}}}]
    turn_runner, _ = runner(tmp_path, working, max_steps=2)
    turn_runner = TurnRunner(turn_runner.settings, max_steps=2, on_max_steps="error")
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="go"))
    assert (result.status, result.finish_reason, result.text) == ("error", "max_steps", "half done")
    assert result.error is not None
    assert result.error.code == "E_MAX_STEPS"
    assert result.to_json()["output"] == "half done"


EMPTY_THEN_RECOVER: list[dict[str, Any]] = [
    {"when": {"input": "^Your last answer was empty"}, "reply": "here it is"},
    {"when": {"input": "^hush$"}, "reply": ""},
    {"when": {"input": "^tool then hush$"}, "call": {"tool": "text__upper", "args": {"text": "x"}}},
    {"when": {"toolResult": "text__upper"}, "reply": ""},
]


async def test_an_empty_answer_is_asked_again_with_a_corrective_message(tmp_path: Path) -> None:
    turn_runner, _ = runner(tmp_path, EMPTY_THEN_RECOVER)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="hush"))
    assert (result.status, result.text, result.step_count) == ("ok", "here it is", 2)
    corrective = [m for m in store.messages if m.metadata.get("__goondanCorrection")]
    assert len(corrective) == 1


async def test_empty_answers_past_two_retries_end_the_turn_with_a_notice(tmp_path: Path) -> None:
    always_empty = [{"reply": ""}]
    turn_runner, _ = runner(tmp_path, always_empty)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="hello"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "E_MODEL_EMPTY_OUTPUT"
    assert result.text == "The model did not produce a response."
    assert result.step_count == 3  # the answer and two retries
    assert store.messages[-1].role == "assistant"
    assert store.messages[-1].content == result.text


async def test_an_empty_answer_after_tool_results_ends_the_turn(tmp_path: Path) -> None:
    turn_runner, _ = runner(tmp_path, EMPTY_THEN_RECOVER)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="tool then hush"))
    assert (result.status, result.step_count) == ("ok", 2)
    assert result.text == "The model did not produce a response."  # never a silent ""


async def test_no_matching_rule_fails_the_turn_not_the_agent(tmp_path: Path) -> None:
    turn_runner, _ = runner(tmp_path, [{"when": {"input": "^never$"}, "reply": "x"}])
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="hello"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "E_MODEL_SCRIPT_NO_MATCH"
    assert "'hello'" in result.error.message


async def test_step_middleware_hides_a_tool_from_the_model_and_the_executor(tmp_path: Path) -> None:
    """The hidden tool's call is refused as not in catalog."""
    turn_runner, pipeline = runner(tmp_path, RULES)
    offered: list[list[str]] = []

    async def hide_all(ctx: StepMiddlewareContext[StepResult]) -> StepResult:
        offered.append([item.name for item in ctx.tool_catalog])
        ctx.tool_catalog.clear()
        return await ctx.next()

    pipeline.register("step", hide_all)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="shout x"))
    assert offered[0] == ["text__upper"]
    assert result.text.startswith("failed: Tool 'text__upper' is not available")


@pytest.mark.parametrize("bad_args", [{"text": 5}, {}])
async def test_invalid_arguments_from_the_model_come_back_as_a_tool_error(
    tmp_path: Path, bad_args: JsonObject
) -> None:
    rules = [
        {"when": {"input": "go"}, "call": {"tool": "text__upper", "args": bad_args}},
        {"when": {"toolResult": "text__upper", "status": "error"}, "reply": "{error}"},
    ]
    turn_runner, _ = runner(tmp_path, rules)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="go"))
    assert result.status == "ok"
    assert result.text.startswith("Invalid arguments for tool 'text__upper'")


async def test_each_step_records_token_usage_and_the_model_call(tmp_path: Path) -> None:
    from agent_process.scope import StepScope, TurnScope
    from agent_process.step import run_step

    turn_runner, _ = runner(tmp_path, RULES)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    import structlog

    from agent_process.conversation import new_message_id
    from tools_base import Message

    store.append(Message(id=new_message_id("m"), role="user", content="shout hi"))
    turn = TurnScope(
        agent_name="shouter",
        instance_key="default",
        turn_id="t",
        trace_id="a" * 32,
        workdir=tmp_path,
        logger=structlog.get_logger(),
    )
    scope = StepScope(turn=turn, index=0)
    step = await run_step(turn_runner.settings, store, scope)
    assert step.usage is not None
    assert step.usage.total_tokens >= 0
    assert step.metadata["model"] == {"scriptRule": "rules[0]"}
    assert step.duration_ms > 0


async def test_calls_past_the_per_step_limit_are_answered_without_running(tmp_path: Path) -> None:
    calls = [{"tool": "text__upper", "args": {"text": f"w{i}"}} for i in range(5)]
    turn_runner, _ = runner(
        tmp_path,
        [
            {"when": {"input": "^many$"}, "calls": calls},
            {"reply": "done"},
        ],
    )
    settings = dataclasses.replace(turn_runner.settings, max_tool_calls_per_step=3)
    turn_runner = TurnRunner(settings)
    store = ConversationStore(tmp_path / "conv")
    store.load()
    result = await turn_runner.run("default", store, tmp_path, TurnInput(text="many"))
    assert (result.status, result.text) == ("ok", "done")
    results = [m.tool_result or {} for m in store.messages if m.role == "tool"]
    assert [r["status"] for r in results] == ["ok", "ok", "ok", "error", "error"]
    assert [r["output"]["text"] for r in results[:3]] == ["W0", "W1", "W2"]
    assert {r["error"]["code"] for r in results[3:]} == {"E_TOOL_CALL_LIMIT"}
