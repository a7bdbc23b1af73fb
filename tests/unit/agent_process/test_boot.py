"""From goondan.yaml to a running Turn, in-process: plan → registry → scripted model → tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_process.boot import BootError, build_executor, build_model, build_registry
from agent_process.conversation import ConversationStore
from agent_process.step import StepSettings
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.turn import TurnInput, TurnRunner
from bundle import ToolPlan, load_bundle
from bundle.plan import ModelPlan, ToolExportPlan

ROOT = Path(__file__).resolve().parents[3]


def test_builtin_tools_load_through_the_same_path_as_user_tools(tmp_path: Path) -> None:
    plan = load_bundle(ROOT / "goondan.yaml.example").agent_plan("worker", tmp_path)
    registry = build_registry(plan.tools)
    names = registry.names()
    assert "file-system__write" in names
    assert "file-system__read" in names
    write = registry.get("file-system__write")
    assert write is not None
    assert write.error_message_limit == 2000
    assert write.source is not None
    assert (write.source.type, write.source.name) == ("config", "file-system")


async def test_the_example_worker_writes_a_file_in_its_workdir(tmp_path: Path) -> None:
    plan = load_bundle(ROOT / "goondan.yaml.example").agent_plan("worker", tmp_path)
    registry = build_registry(plan.tools)
    pipeline = MiddlewarePipeline()
    executor = build_executor(plan, registry, pipeline)
    runner = TurnRunner(
        StepSettings(
            agent_name=plan.agent_name,
            model=build_model(plan.model, plan.agent_name),
            registry=registry,
            executor=executor,
            pipeline=pipeline,
            config_tool_names=tuple(plan.catalog_tools),
            system_prompt=plan.system_prompt,
        ),
        max_steps=plan.max_steps_per_turn,
    )
    store = ConversationStore(tmp_path / "conversation")
    store.load()
    workdir = tmp_path / "workspace"
    workdir.mkdir()
    result = await runner.run(
        "default", store, workdir, TurnInput(text="write notes.txt hello world")
    )
    await executor.aclose()
    assert result.status == "ok", result
    assert (workdir / "notes.txt").read_text() == "hello world"
    assert result.text == "wrote 11 bytes to notes.txt"


def test_a_tool_module_that_fails_to_load_is_a_boot_error(tmp_path: Path) -> None:
    broken = ToolPlan(
        name="broken",
        entry_path=str(ROOT / "tests" / "fixtures" / "bundles" / "raises_on_import.py"),
        exports=[ToolExportPlan(name="x")],
    )
    with pytest.raises(BootError, match="Tool/broken: cannot load handlers"):
        build_registry([broken])


def test_an_unknown_provider_is_a_boot_error() -> None:
    with pytest.raises(BootError, match="provider 'nope'"):
        build_model(ModelPlan(name="m", provider="nope", model="x"), "a")


def test_the_registry_holds_every_tool_of_the_bundle_and_loads_others_on_first_call(
    tmp_path: Path,
) -> None:
    """The Registry is every Tool resource of the bundle, plus dynamic tools."""
    import sys

    plan = load_bundle(ROOT / "goondan.yaml.example").agent_plan("worker", tmp_path)
    assert {t.name for t in plan.registry_tools} >= {"json-query", "agents", "http-fetch"}
    assert {"file-system", "bash"}.isdisjoint(t.name for t in plan.registry_tools)  # its own
    before = set(sys.modules)
    registry = build_registry(plan.tools, plan.registry_tools)
    assert "json-query__query" in registry
    assert registry.item("json-query__query") is not None
    assert not {m for m in set(sys.modules) - before if "json_query" in m}  # not imported yet
    assert {i.name for i in registry.items()} >= {"file-system__write", "bash__exec"}
    query = registry.get("json-query__query")
    assert query is not None
    assert callable(query.handler)
    assert query.source is not None
    assert query.source.name == "json-query"


async def test_a_bundle_tool_that_cannot_load_fails_only_its_own_calls(tmp_path: Path) -> None:
    from agent_process.scope import StepScope, TurnScope
    from agent_process.tools.executor import ToolCallPolicy, ToolExecutor
    from tools_base import Message, ToolCall

    entry = tmp_path / "broken.py"
    entry.write_text("raise SystemExit('no import for you')\n")
    broken = ToolPlan(
        name="broken",
        entry_path=str(entry),
        exports=[ToolExportPlan(name="run")],
    )
    registry = build_registry([], [broken])
    assert "broken__run" in registry
    executor = ToolExecutor(registry, policy=ToolCallPolicy(allow_registry_calls=True))
    import structlog

    turn = TurnScope(
        agent_name="a",
        instance_key="default",
        turn_id="t",
        trace_id="0" * 32,
        workdir=tmp_path,
        logger=structlog.get_logger(),
    )
    scope = StepScope(turn=turn, index=0)
    message = Message(id="m", role="assistant")
    result = await executor.execute(ToolCall(id="c", name="broken__run", args={}), scope, message)
    await executor.aclose()
    assert result.error is not None
    assert result.error.code == "E_TOOL_LOAD_FAILED"
    assert "SystemExit: no import for you" in result.error.message


def test_an_extension_tool_outranks_an_unloaded_bundle_tool_of_the_same_name(
    tmp_path: Path,
) -> None:
    from agent_process.tools.catalog import ToolCatalogItem

    other = ToolPlan(
        name="x", entry_path=str(tmp_path / "missing.py"), exports=[ToolExportPlan(name="y")]
    )
    registry = build_registry([], [other])
    registry.register(ToolCatalogItem(name="x__y"), lambda ctx, args: "dynamic")
    tool = registry.get("x__y")
    assert tool is not None
    assert tool.handler(None, {}) == "dynamic"  # type: ignore[arg-type]
    assert [i.name for i in registry.items()] == ["x__y"]


def test_a_tool_listed_twice_is_one_tool_with_the_last_config(tmp_path: Path) -> None:
    source = (
        (ROOT / "goondan.yaml.example")
        .read_text()
        .replace(
            """  tools:
    - ref: { kind: Tool, name: file-system, package: "@goondan/base" }""",
            """  tools:
    - ref: { kind: Tool, name: file-system, package: "@goondan/base" }
      config: { maxReadBytes: 10 }
    - ref: { kind: Tool, name: bash, package: "@goondan/base" }
    - ref: { kind: Tool, name: file-system, package: "@goondan/base" }
      config: { maxReadBytes: 20 }""",
        )
    )
    path = tmp_path / "goondan.yaml"
    path.write_text(source)
    plan = load_bundle(path).agent_plan("worker", tmp_path)
    assert [t.name for t in plan.tools] == ["file-system", "bash"]
    assert plan.tools[0].config["maxReadBytes"] == 20
    assert len(plan.catalog_tools) == len(set(plan.catalog_tools))
    registry = build_registry(plan.tools, plan.registry_tools)  # boots: no duplicate name
    assert "file-system__read" in registry
