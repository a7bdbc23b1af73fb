"""An agent's Turn loop in-process with real extensions loaded, for extension tests.

    harness = await ExtensionHarness.start(
        tmp_path,
        rules=[{"reply": "hi"}],
        extensions=[base_extension("message-window", maxMessages=4)],
    )
    result = await harness.turn("hello")

Everything is real except the process boundary: the registry, pipeline, executor, scripted
model, conversation files and the :class:`~agent_process.extensions.ExtensionHost`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import tools_base
from agent_process.conversation import ConversationStore
from agent_process.extensions import ExtensionHost
from agent_process.models.scripted import ScriptedModel
from agent_process.step import StepSettings
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from agent_process.turn import TurnInput, TurnResult, TurnRunner
from bundle.plan import ExtensionPlan
from bundle.scripted import ScriptSpec
from tools_base import AgentInfo, Message

BASE = Path(tools_base.__file__).parent
_MANIFEST = [d for d in yaml.safe_load_all((BASE / "goondan.yaml").read_text()) if d]


def base_extension(name: str, **config: Any) -> ExtensionPlan:
    """The ``@goondan/base`` Extension ``name``, with ``config`` over its manifest defaults."""
    [doc] = [d for d in _MANIFEST if d["kind"] == "Extension" and d["metadata"]["name"] == name]
    entry = (BASE / doc["spec"]["entry"]).resolve()
    return ExtensionPlan(
        name=name, entry_path=str(entry), config={**doc["spec"].get("config", {}), **config}
    )


def extension_file(path: Path, source: str, name: str = "custom") -> ExtensionPlan:
    """An Extension whose module is ``source``, written to ``path``."""
    path.write_text(source)
    return ExtensionPlan(name=name, entry_path=str(path))


@dataclass
class ExtensionHarness:
    """One agent, one instance (``default``) under ``root``."""

    root: Path
    runner: TurnRunner
    host: ExtensionHost
    registry: ToolRegistry
    store: ConversationStore
    workdir: Path
    results: list[TurnResult] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        root: Path,
        *,
        rules: list[dict[str, Any]],
        extensions: Sequence[ExtensionPlan] = (),
        tools: dict[str, Callable[..., Any]] | None = None,
        system_prompt: str | None = None,
        required_tools: Sequence[str] = (),
        max_steps: int = 8,
    ) -> ExtensionHarness:
        """Build the agent, load ``extensions`` in order; ``tools`` maps full names to handlers
        (their parameters accept any object)."""
        registry = ToolRegistry()
        for name, handler in (tools or {}).items():
            registry.register(
                ToolCatalogItem(name=name, source=ToolSource(type="config", name=name)), handler
            )
        pipeline = MiddlewarePipeline()
        host = ExtensionHost(
            agent=AgentInfo(
                name="tester",
                swarm_name="default",
                system_prompt=system_prompt,
                tools=tuple(tools or ()),
                required_tools=tuple(required_tools),
                agents=("tester",),
            ),
            pipeline=pipeline,
            registry=registry,
        )
        await host.load(extensions)
        settings = StepSettings(
            agent_name="tester",
            model=ScriptedModel(ScriptSpec.model_validate({"rules": rules}), agent_name="tester"),
            registry=registry,
            executor=ToolExecutor(registry, pipeline),
            pipeline=pipeline,
            config_tool_names=tuple(tools or ()),
            system_prompt=system_prompt,
        )
        instance = root / "agents" / "tester" / "instances" / "default"
        store = ConversationStore(instance / "conversation")
        store.load()
        workdir = instance / "workspace"
        workdir.mkdir(parents=True, exist_ok=True)
        return cls(
            root=root,
            runner=TurnRunner(settings, max_steps=max_steps),
            host=host,
            registry=registry,
            store=store,
            workdir=workdir,
        )

    async def turn(self, text: str, turn_input: TurnInput | None = None) -> TurnResult:
        """Run one Turn of the ``default`` instance (``turn_input``: a Turn input of one's own)."""
        turn_input = turn_input or TurnInput(text=text)
        result = await self.runner.run("default", self.store, self.workdir, turn_input)
        self.results.append(result)
        return result

    @property
    def messages(self) -> list[Message]:
        """The conversation as it is on disk now."""
        return ConversationStore(self.store.directory).load()

    @property
    def state_directory(self) -> Path:
        """Where the instance's extension states are saved."""
        return self.store.directory.parent / "extensions"

    async def close(self) -> None:
        """Run the extensions' stop callbacks and release the executor."""
        await self.host.aclose()
        await self.runner.settings.executor.aclose()
