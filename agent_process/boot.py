"""Build an agent's runtime parts from its resolved plan: registry, model, executor, runner.

Everything here runs once, when an AgentProcess starts. A failure is a :class:`BootError`
naming what could not be built; the process then exits with the reserved boot-failure code so
the supervisor backs off instead of restarting a broken configuration at full speed.
"""

from __future__ import annotations

from pathlib import Path

from agent_process.models.base import ChatModel, ModelError
from agent_process.models.scripted import ScriptedModel
from agent_process.tools.catalog import ToolCatalogItem, ToolSource
from agent_process.tools.executor import (
    DEFAULT_HANDLER_TIMEOUT_SECONDS,
    PendingListener,
    ToolCallPolicy,
    ToolExecutor,
)
from agent_process.tools.middleware import MiddlewarePipeline
from agent_process.tools.naming import build_tool_name
from agent_process.tools.registry import ToolRegistrationError, ToolRegistry
from bundle.entry import load_entry_module, resolve_handlers
from bundle.plan import AgentPlan, ModelPlan, ToolPlan
from bundle.scripted import ScriptSpec


class BootError(Exception):
    """The agent cannot start: its plan names something that does not load."""

    code = "E_AGENT_BOOT"


def build_registry(tools: list[ToolPlan]) -> ToolRegistry:
    """Load every Tool's entry module and register each export under ``{tool}__{export}``."""
    registry = ToolRegistry()
    for tool in tools:
        try:
            module = load_entry_module(Path(tool.entry_path))
            handlers = resolve_handlers(module, tool.config)
        except Exception as exc:
            raise BootError(
                f"Tool/{tool.name}: cannot load handlers from {tool.entry_path}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        for export in tool.exports:
            handler = handlers.get(export.name)
            if handler is None:
                raise BootError(f"Tool/{tool.name}: no handler for export {export.name!r}")
            item = ToolCatalogItem(
                name=build_tool_name(tool.name, export.name),
                description=export.description,
                parameters=export.parameters,
                source=ToolSource(type="config", name=tool.name),
            )
            try:
                registry.register(
                    item,
                    handler,
                    error_message_limit=tool.error_message_limit,
                    timeout_seconds=tool.timeout_seconds,
                )
            except ToolRegistrationError as exc:
                raise BootError(f"Tool/{tool.name}: {exc}") from exc
    return registry


def build_model(plan: ModelPlan, agent_name: str) -> ChatModel:
    """The provider named by ``Model.spec.provider``."""
    provider = plan.provider.lower()
    if provider == "scripted":
        try:
            script = ScriptSpec.model_validate(plan.spec.get("script") or {})
        except ValueError as exc:
            raise BootError(f"Model/{plan.name}: invalid script: {exc}") from exc
        return ScriptedModel(script, agent_name=agent_name, model_name=plan.name)
    if provider in ("openai", "anthropic"):
        # Imported here so an agent never loads an SDK it does not use.
        try:
            if provider == "openai":
                from agent_process.models.openai_chat import OpenAIChatModel

                return OpenAIChatModel(plan, agent_name)
            from agent_process.models.anthropic_messages import AnthropicMessagesModel

            return AnthropicMessagesModel(plan, agent_name)
        except ModelError as exc:
            raise BootError(f"Model/{plan.name}: {exc}") from exc
    raise BootError(
        f"Model/{plan.name}: provider {plan.provider!r} is not available; "
        "use `scripted` (offline), `openai` or `anthropic`"
    )


def build_executor(
    plan: AgentPlan,
    registry: ToolRegistry,
    pipeline: MiddlewarePipeline,
    on_pending_complete: PendingListener | None = None,
) -> ToolExecutor:
    """The executor with the agent's tool-call policy."""
    policy = ToolCallPolicy(
        allow_registry_calls=plan.allow_registry_calls,
        default_timeout_seconds=plan.handler_timeout_seconds or DEFAULT_HANDLER_TIMEOUT_SECONDS,
        max_pending_calls=plan.max_pending_calls,
    )
    return ToolExecutor(registry, pipeline, policy=policy, on_pending_complete=on_pending_complete)
