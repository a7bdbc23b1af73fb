"""The context a ``turn`` middleware gets (:class:`TurnMiddlewareContext`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_process.conversation import ConversationStore, MessageEvent
from agent_process.scope import TurnScope
from agent_process.tools.middleware import MiddlewareContext, TurnIdentity
from agent_process.turn_types import TurnInput, TurnResult
from tools_base import JsonValue, Message


class TurnMiddlewareContext(TurnIdentity, MiddlewareContext[TurnResult]):
    """Context of a ``turn`` middleware.

    ``metadata`` is the layers' to change, and the conversation through
    ``emit_message_event``; the rest is read-only.
    """

    __slots__ = ("_input", "_store", "metadata", "scope")

    def __init__(
        self,
        chain: Any,
        core: Any,
        *,
        scope: TurnScope,
        turn_input: TurnInput,
        store: ConversationStore,
    ) -> None:
        super().__init__(chain, core)
        self.scope = scope
        """The Turn's identity, logger, runtime and recorder; read-only by convention."""
        self._input = turn_input
        self._store = store
        self.metadata: dict[str, JsonValue] = {}
        """Scratch space of the Turn, shared with every Step's ``turn_metadata``."""

    @property
    def input(self) -> TurnInput:
        """What started the Turn; its user message is already in ``messages``."""
        return self._input

    @property
    def store(self) -> ConversationStore:
        """The conversation store of the instance."""
        return self._store

    @property
    def inbound(self) -> Mapping[str, str]:
        """Properties of the connector event that started the Turn (empty for other input)."""
        return self.scope.inbound

    @property
    def turn_scope(self) -> TurnScope:
        """The Turn's scope."""
        return self.scope

    @property
    def messages(self) -> list[Message]:
        """The conversation as it stands."""
        return self._store.messages

    def emit_message_event(self, event: MessageEvent) -> None:
        """Change the conversation (append, replace, remove, truncate); persisted at once."""
        self._store.emit(event)
