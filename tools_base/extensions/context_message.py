"""``context-message``: tell the model where it runs, in one system message.

Before every Turn (a ``turn`` layer, before ``next()``), composes the enabled segments, in this
order, into one system message:

- the agent prompt (``includeAgentPrompt``), only when the conversation does not already start
  with it: this runtime sends and keeps the agent's system prompt itself;
- ``[runtime_catalog]``: the swarm, this agent and the agents it can call
  (``includeSwarmCatalog``);
- ``[runtime_inbound]``: who sent the Turn's input, and for a connector's event its properties
  (chat id, channel, ...) (``includeInboundContext``);
- ``[runtime_call]``: the chain of agents waiting on this Turn (``includeCallContext``).

The message carries ``metadata.__goondanContextMessage: {promptHash, segmentIds}``
(``promptHash`` is the SHA-256 of its text) and is not appended again while a message with the
same hash is in the conversation, so an unchanged context costs nothing after the first Turn.

Config: ``includeAgentPrompt`` (true), ``includeSwarmCatalog`` (false),
``includeInboundContext`` (false), ``includeCallContext`` (false).

Example::

    extensions:
      - ref: { kind: Extension, name: context-message, package: "@goondan/base" }
        config: { includeSwarmCatalog: true }
"""

from __future__ import annotations

import hashlib
from typing import Any

from tools_base import ExtensionApi, JsonValue, MessageEvent
from tools_base.extensions._common import config_bool, extension_message, is_system_prompt

MARK = "__goondanContextMessage"
MAX_PROPERTIES = 32
"""Properties of a connector's event shown in ``[runtime_inbound]``, at most."""
MAX_PROPERTY_CHARS = 200


def register(api: ExtensionApi) -> None:
    """Register the context message as a ``turn`` layer."""
    with_prompt = config_bool(api.config, "includeAgentPrompt", True)
    with_catalog = config_bool(api.config, "includeSwarmCatalog", False)
    with_inbound = config_bool(api.config, "includeInboundContext", False)
    with_call = config_bool(api.config, "includeCallContext", False)
    agent = api.agent

    async def context(ctx: Any) -> Any:
        messages = ctx.messages
        segments: list[tuple[str, str]] = []
        prompt = agent.system_prompt
        has_prompt = bool(messages) and is_system_prompt(messages[0])
        if with_prompt and prompt and not has_prompt:
            segments.append(("agent_prompt", prompt))
        if with_catalog:
            callable_agents = ", ".join(a for a in agent.agents if a != agent.name) or "(none)"
            segments.append(
                (
                    "runtime_catalog",
                    f"[runtime_catalog]\nswarm: {agent.swarm_name}\nself: {agent.name}\n"
                    f"callable agents: {callable_agents}",
                )
            )
        if with_inbound:
            source = ctx.input
            lines = [
                "[runtime_inbound]",
                f"source: {source.source_kind} {source.source_name}",
                f"event: {source.event_type}",
            ]
            lines += [  # a connector's event: chat id, channel, ...
                f"{key}: {value[:MAX_PROPERTY_CHARS]}"
                for key, value in sorted(ctx.inbound.items())[:MAX_PROPERTIES]
            ]
            segments.append(("runtime_inbound", "\n".join(lines)))
        if with_call and ctx.input.call_chain:
            segments.append(
                ("runtime_call", "[runtime_call]\ncall chain: " + " -> ".join(ctx.input.call_chain))
            )
        if segments:
            text = "\n\n".join(body for _, body in segments)
            digest = hashlib.sha256(text.encode()).hexdigest()
            seen = any(
                isinstance(m.metadata.get(MARK), dict)
                and m.metadata[MARK].get("promptHash") == digest
                for m in messages
            )
            if not seen:
                mark: dict[str, JsonValue] = {
                    "promptHash": digest,
                    "segmentIds": [name for name, _ in segments],
                }
                ctx.emit_message_event(
                    MessageEvent.append(
                        extension_message(api.name, text, role="system", metadata={MARK: mark})
                    )
                )
        return await ctx.next()

    api.pipeline.register("turn", context)
