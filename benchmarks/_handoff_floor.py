"""The compute floor of the handoff Turn of ``benchmarks/ipc.py``: the same two agents' model
Steps and tool calls, run in one process with no IPC and no persistence.

Alpha's model asks for ``agents__request``; here that tool runs beta's Turn directly, in the
same process. The models are the scripted ones of the benchmark's swarm (the same rules, so the
same matching work), the tool calls go through the real executor and middleware pipeline, and
the conversations live in memory only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from agent_process.conversation import ConversationStore
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnRunner
from benchmarks._checks import expect
from bundle.scripted import ScriptSpec
from tools_base import JsonObject, JsonValue, MessageEvent, ToolContext


class MemoryConversation(ConversationStore):
    """A conversation that never touches the disk."""

    def load(self) -> list[Any]:
        return self.messages

    def emit(self, event: MessageEvent) -> None:
        self._apply(event)

    def fold(self) -> None:
        return

    def sync(self) -> None:
        return


def _script(swarm_yaml: str, model: str) -> ScriptSpec:
    for document in yaml.safe_load_all(swarm_yaml):
        if document["kind"] == "Model" and document["metadata"]["name"] == model:
            return ScriptSpec.model_validate(document["spec"]["script"])
    raise LookupError(model)


def _runner(name: str, script: ScriptSpec, tools: dict[str, Any]) -> TurnRunner:
    registry = ToolRegistry()
    for tool_name, handler in tools.items():
        registry.register(
            ToolCatalogItem(
                name=tool_name,
                parameters={"type": "object", "properties": {}},
                source=ToolSource(type="config", name=tool_name.split("__")[0]),
            ),
            handler,
        )
    pipeline = MiddlewarePipeline()
    settings = StepSettings(
        agent_name=name,
        model=ScriptedModel(script, agent_name=name),
        registry=registry,
        executor=ToolExecutor(registry, pipeline),
        pipeline=pipeline,
        config_tool_names=tuple(tools),
    )
    return TurnRunner(settings)


async def inprocess_handoff(swarm_yaml: str, workdir: Path, count: int) -> list[float]:
    """Seconds per ``ask beta hi`` Turn of alpha, with beta's Turn run by the tool in-process."""
    beta = _runner("beta", _script(swarm_yaml, "beta-brain"), {})
    beta_conversation = MemoryConversation(workdir / "beta")

    async def request(ctx: ToolContext, args: JsonObject) -> JsonValue:
        result = await beta.run(
            "default", beta_conversation, workdir, TurnInput(text=str(args["input"]))
        )
        return {"target": args["target"], "accepted": True, "response": result.text}

    alpha = _runner("alpha", _script(swarm_yaml, "alpha-brain"), {"agents__request": request})
    alpha_conversation = MemoryConversation(workdir / "alpha")
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        result = await alpha.run(
            "default", alpha_conversation, workdir, TurnInput(text="ask beta hi")
        )
        samples.append(time.perf_counter() - started)
        expect(result.text == "beta got: hi", result)
    return samples
