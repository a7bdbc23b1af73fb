"""Build an agent's runtime parts from its resolved plan: registry, model, executor, runner.

Everything here runs once, when an AgentProcess starts. A failure is a :class:`BootError`
naming what could not be built; the process then exits with the reserved boot-failure code so
the supervisor backs off instead of restarting a broken configuration at full speed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent_process.models.base import ChatModel, ModelCallError
from agent_process.models.scripted import ScriptedModel
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import (
    DEFAULT_HANDLER_TIMEOUT_SECONDS,
    PendingListener,
    PendingStartListener,
    ToolCallPolicy,
    ToolExecutor,
)
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.naming import build_tool_name
from agent_process.tools.registry import ToolRegistrationError, ToolRegistry
from bundle.entry import load_entry_module, resolve_handlers
from bundle.plan import AgentPlan, ModelPlan, ToolPlan
from goondan.errors import ConfigCode, ConfigError
from tools_base import ToolHandler


class BootError(ConfigError):
    """The agent cannot start: its plan names something that does not load."""

    code = ConfigCode.E_AGENT_BOOT


def build_registry(tools: list[ToolPlan], registry_tools: Sequence[ToolPlan] = ()) -> ToolRegistry:
    """The agent's Tool Registry.

    ``tools`` (the agent's own) are loaded now, and a module that fails is a :class:`BootError`
    (their entries, argument validators included, are built on first use);
    ``registry_tools`` (the bundle's other Tools) are registered by name and loaded on their
    first call, so they cost nothing until used and a broken one fails only its own calls.
    """
    registry = ToolRegistry()
    for tool in tools:
        try:
            handlers = _load_handlers(tool)
        except Exception as exc:
            raise BootError(
                f"Tool/{tool.name}: cannot load handlers from {tool.entry_path}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        for export, item in _catalog_items(tool):
            handler = handlers.get(export)
            if handler is None:
                raise BootError(f"Tool/{tool.name}: no handler for export {export!r}")
            try:
                # Checked now, its argument validator compiled on its first call.
                registry.register_loaded(
                    item,
                    handler,
                    error_message_limit=tool.error_message_limit,
                    timeout_seconds=tool.timeout_seconds,
                )
            except ToolRegistrationError as exc:
                raise BootError(f"Tool/{tool.name}: {exc}") from exc
    for tool in registry_tools:
        try:
            registry.register_deferred(
                _catalog_items(tool),
                functools.partial(_load_handlers, tool),
                error_message_limit=tool.error_message_limit,
                timeout_seconds=tool.timeout_seconds,
            )
        except ToolRegistrationError as exc:
            raise BootError(f"Tool/{tool.name}: {exc}") from exc
    return registry


def _load_handlers(tool: ToolPlan) -> Mapping[str, ToolHandler]:
    return resolve_handlers(load_entry_module(Path(tool.entry_path)), tool.config)


def _catalog_items(tool: ToolPlan) -> list[tuple[str, ToolCatalogItem]]:
    return [
        (
            export.name,
            ToolCatalogItem(
                name=build_tool_name(tool.name, export.name),
                description=export.description,
                parameters=export.parameters,
                source=ToolSource(type="config", name=tool.name),
            ),
        )
        for export in tool.exports
    ]


def build_model(plan: ModelPlan, agent_name: str) -> ChatModel:
    """The provider named by ``Model.spec.provider`` (behind a cassette under test)."""
    if plan.cassette is not None:
        from agent_process.models.cassette import CassetteModel

        bare = plan.model_copy(update={"cassette": None})
        return CassetteModel(plan.cassette, agent_name, lambda: build_model(bare, agent_name))
    provider = plan.provider.lower()
    if provider == "scripted":
        if plan.script is None:
            raise BootError(f"Model/{plan.name}: provider `scripted` needs a script")
        return ScriptedModel(plan.script, agent_name=agent_name, model_name=plan.name)
    if provider in ("openai", "anthropic", "google"):
        # Imported here so an agent never loads an SDK it does not use.
        try:
            if provider == "openai":
                from agent_process.models.openai_chat import OpenAIChatModel

                return OpenAIChatModel(plan, agent_name)
            if provider == "google":
                from agent_process.models.google_gemini import GeminiModel

                return GeminiModel(plan, agent_name)
            from agent_process.models.anthropic_messages import AnthropicMessagesModel

            return AnthropicMessagesModel(plan, agent_name)
        except ModelCallError as exc:
            raise BootError(f"Model/{plan.name}: {exc}") from exc
    raise BootError(
        f"Model/{plan.name}: provider {plan.provider!r} is not available; "
        "use `scripted` (offline), `openai`, `anthropic` or `google`"
    )


def build_executor(
    plan: AgentPlan,
    registry: ToolRegistry,
    pipeline: MiddlewarePipeline,
    on_pending_complete: PendingListener | None = None,
    on_pending_start: PendingStartListener | None = None,
) -> ToolExecutor:
    """The executor with the agent's tool-call policy."""
    policy = ToolCallPolicy(
        allow_registry_calls=plan.allow_registry_calls,
        default_timeout_seconds=plan.handler_timeout_seconds or DEFAULT_HANDLER_TIMEOUT_SECONDS,
        max_pending_calls=plan.max_pending_calls,
    )
    return ToolExecutor(
        registry,
        pipeline,
        policy=policy,
        on_pending_complete=on_pending_complete,
        on_pending_start=on_pending_start,
    )
