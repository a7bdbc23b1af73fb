"""The Orchestrator's one dispatch table: every message from an agent, to its one handler.

Requests and answers go to the router; each event kind goes to the handler that the supervisor
(lifecycle), the router (sends, spawns, questions) or the daemon (runtime events, restarts)
registered for it. A kind nobody registered, or a payload of the wrong shape, is logged and
dropped: nothing an agent sends can raise into the channel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from ipc import (
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    IpcError,
    IpcMessage,
)
from ipc.events import read_event
from ipc.protocol import EventKind

EventHandler = Callable[[str, EventMessage, Any], None]
"""``(sender, message, body)``: one entry of a dispatch table (``body`` is the message's typed
body, of the class :data:`ipc.events.EVENT_BODIES` names for the kind)."""


class Router(Protocol):
    """What the dispatch table hands to the router (:class:`orchestrator.router.Router`, which
    builds on the supervisor that builds on this module, so it is named by this shape)."""

    @property
    def event_handlers(self) -> Mapping[EventKind, EventHandler]:
        """The event kinds the router handles."""

    def route_delegate(self, caller: str, message: DelegateMessage) -> None:
        """Admit and forward a request."""

    def take_result(self, sender: str, message: DelegateResultMessage) -> None:
        """Hand a target's answer to its caller."""


class Dispatcher:
    """Routes each message from an agent to its handler (a ``MessageHandler``)."""

    def __init__(self, router: Router | None, *tables: Mapping[EventKind, EventHandler]) -> None:
        self.router = router
        self.events: dict[EventKind, EventHandler] = {}
        routing = router.event_handlers if router is not None else {}
        for table in (*tables, routing):
            for kind, handler in table.items():
                if kind in self.events:
                    raise ValueError(f"two handlers for event kind {kind!r}")
                self.events[kind] = handler
        self.log = structlog.get_logger("goondan.dispatch")

    def __call__(self, sender: str, message: IpcMessage) -> None:
        if isinstance(message, EventMessage):
            self._event(sender, message)
        elif self.router is None:
            self.log.warning("no router for a message from agent", agent=sender, type=message.type)
        elif isinstance(message, DelegateMessage):
            self.router.route_delegate(sender, message)
        elif isinstance(message, DelegateResultMessage):
            self.router.take_result(sender, message)
        else:
            self.log.warning("unexpected message from agent", agent=sender, type=message.type)

    def _event(self, sender: str, message: EventMessage) -> None:
        try:
            body = read_event(message)
        except IpcError as exc:
            self.log.warning(
                "event refused", agent=sender, kind=message.kind, code=exc.code, error=exc.message
            )
            return
        handler = self.events.get(body.KIND)
        if handler is None:
            self.log.debug("event not routed", agent=sender, kind=body.KIND)
            return
        handler(sender, message, body)
