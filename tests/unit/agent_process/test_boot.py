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
