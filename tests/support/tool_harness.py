"""Builders for Tool-system tests: a registry, a Step scope, an assistant message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from agent_process.scope import StepScope, TurnScope
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import ToolCallPolicy, ToolExecutor
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.registry import ToolRegistry
from tools_base import JsonObject, Message, MessageSource, ToolCall, ToolCallResult

OBJECT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def item(
    name: str, parameters: JsonObject | None = None, source: str = "config"
) -> ToolCatalogItem:
    """A catalog item with a config (or other) source named after the resource part."""
    return ToolCatalogItem(
        name=name,
        description=f"test tool {name}",
        parameters=parameters if parameters is not None else OBJECT_SCHEMA,
        source=ToolSource(type=source, name=name.split("__")[0]),  # type: ignore[arg-type]
    )


ASSISTANT = Message(
    id="msg-assistant-1",
    role="assistant",
    content="",
    tool_calls=(ToolCall(id="call-1", name="echo__say", args={"text": "hi"}),),
    source=MessageSource(type="assistant", step_id="turn-1-step-0"),
)


class Harness:
    """A registry, a pipeline and an executor wired together, plus a way to call tools."""

    def __init__(self, workdir: Path, policy: ToolCallPolicy | None = None) -> None:
        self.workdir = workdir
        self.registry = ToolRegistry()
        self.pipeline = MiddlewarePipeline()
        self.completions: list[Any] = []
        self.executor = ToolExecutor(
            self.registry, self.pipeline, policy=policy, on_pending_complete=self.completions.append
        )
        self.catalog: frozenset[str] | None = None

    def add(self, name: str, handler: Callable[..., Any], **kwargs: Any) -> None:
        parameters = kwargs.pop("parameters", None)
        self.registry.register(item(name, parameters), handler, **kwargs)

    def scope(self) -> StepScope:
        turn = TurnScope(
            agent_name="tester",
            instance_key="default",
            turn_id="turn-1",
            trace_id="a" * 32,
            workdir=self.workdir,
            logger=structlog.get_logger(),
        )
        allowlist = self.catalog if self.catalog is not None else frozenset(self.registry.names())
        return StepScope(turn=turn, index=0, allowlist=allowlist)

    async def call(
        self,
        name: str,
        args: JsonObject | None = None,
        call_id: str = "call-1",
        *,
        malformed_arguments: str | None = None,
    ) -> ToolCallResult:
        call = ToolCall(
            id=call_id,
            name=name,
            args=args if args is not None else {"text": "hi"},
            malformed_arguments=malformed_arguments,
        )
        return await self.executor.execute(call, self.scope(), ASSISTANT)
