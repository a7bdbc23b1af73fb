"""The Connector SDK: what a connector's ``run(ctx)`` gets, and the events it emits.

A Connector resource names a Python module with an async ``run`` function::

    from tools_base import ConnectorContext, ConnectorEvent, TextMessage

    async def run(ctx: ConnectorContext) -> None:
        async for line in read_lines():
            await ctx.emit(ConnectorEvent("stdin_message", TextMessage(line), "cli:default"))

Each Connection runs its connector's ``run`` in a process of its own, supervised like an
agent: ``run`` is meant to run until the swarm stops (it is then cancelled). Raising ends the
process as a crash (restarted with backoff); returning ends it cleanly, which for a source
that is exhausted (the ``cli`` connector at end of input) stops the swarm once the work in
flight is done.

``emit`` hands an event to the Orchestrator, which routes it by the Connection's
``ingress.rules`` as a send to an agent; it waits while too many of the connection's events are
in flight (back-pressure), so a fast source slows down instead of losing events. Both ``emit``
and ``accept`` journal the event first, so one accepted is delivered even if the connector or
the daemon is killed before its Turn. ``report_failure``/``report_success`` give the
Connection the health ``status`` shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from goondan.errors import ConfigCode, ConfigError
from tools_base._context import ToolLogger


@dataclass(frozen=True, slots=True)
class TextMessage:
    """A text message."""

    text: str


@dataclass(frozen=True, slots=True)
class ImageMessage:
    """An image, by URL."""

    url: str


@dataclass(frozen=True, slots=True)
class FileMessage:
    """A file, by URL, with its name."""

    url: str
    name: str


ConnectorMessage = TextMessage | ImageMessage | FileMessage


@dataclass(frozen=True, slots=True)
class ConnectorEvent:
    """One event from outside the swarm.

    ``name`` is one of the Connector's declared ``events``; ``instance_key`` is the conversation
    it belongs to unless an ingress rule says otherwise (``telegram:<chatId>``, say);
    ``properties`` are text values the ingress rules match on.

    ``delivery_id`` is the source's own id for what brought the event (a webhook's delivery id,
    a Telegram ``update_id``), when it has one: the runtime derives the event's id from it, so
    the same delivery accepted again (a sender retrying after a lost answer, an update fetched
    again after a crash) is the same event, journaled and run once.
    """

    name: str
    message: ConnectorMessage
    instance_key: str
    properties: Mapping[str, str] = field(default_factory=dict)
    delivery_id: str | None = None

    def text(self) -> str:
        """The input an agent's Turn gets: the text, or ``[image] <url>`` /
        ``[file:<name>] <url>``."""
        message = self.message
        if isinstance(message, TextMessage):
            return message.text
        if isinstance(message, ImageMessage):
            return f"[image] {message.url}"
        return f"[file:{message.name}] {message.url}"


@dataclass(frozen=True, slots=True)
class TurnAnswer:
    """How the Turn an event started ended (see
    :meth:`ConnectorContext.emit_awaiting_answer`)."""

    text: str | None = None
    """The Turn's answer: the last text the agent produced."""
    error: str | None = None
    """Why there is no answer: the Turn failed (``"<code>: <message>"``) or the event was not
    delivered."""

    @property
    def ok(self) -> bool:
        """Whether the Turn ended with an answer."""
        return self.error is None and self.text is not None


def lookup_setting(
    names: tuple[str, ...],
    secrets: Mapping[str, str],
    config: Mapping[str, str],
    environ: Mapping[str, str],
    default: str | None = None,
) -> str | None:
    """The first of ``names`` set (non-empty) in ``secrets`` or ``config`` (a name's secret
    before its config), then in ``environ``; else ``default``: what
    :meth:`ConnectorContext.setting` answers."""
    for name in names:
        for source in (secrets, config):
            if source.get(name):
                return source[name]
    for name in names:
        if environ.get(name):
            return environ[name]
    return default


class ConnectorError(ConfigError, ValueError):
    """A connector was set up wrongly (a missing secret, a bad port, ...): the process does
    not start, and ``status`` shows why."""

    code = ConfigCode.E_CONNECTOR_CONFIG


class ConnectorContext(Protocol):
    """What a connector's ``run`` gets."""

    @property
    def connection_name(self) -> str:
        """The Connection running this connector."""
        ...

    @property
    def config(self) -> Mapping[str, str]:
        """The Connection's ``config`` values, resolved."""
        ...

    @property
    def secrets(self) -> Mapping[str, str]:
        """The Connection's ``secrets``, resolved; never log them."""
        ...

    @property
    def logger(self) -> ToolLogger:
        """A structured logger bound to the connection."""
        ...

    @property
    def state_dir(self) -> Path | None:
        """A private directory of the Connection's own in the state directory
        (``connections/<name>/``) for what must outlive the connector's process, such as the
        deliveries the HTTP connectors have taken; ``None`` where there is none (a test
        harness), and then nothing survives a restart."""
        ...

    async def emit(self, event: ConnectorEvent) -> None:
        """Deliver ``event`` into the swarm; waits while the connection has too many events in
        flight. The event is journaled (on disk, delivered after a crash of the connector or
        the daemon) before this returns. Raises ``ValueError`` for an event the Connector does
        not declare, ``OSError`` when the journal cannot be written. An event whose
        ``delivery_id`` was accepted already is not taken twice: this returns once that one is
        on disk."""
        ...

    async def accept(self, event: ConnectorEvent) -> bool:
        """Take ``event`` for delivery without waiting for a place in flight: ``True`` once it
        is journaled (answer the sender now: it will be delivered, after a crash too);
        ``False``, nothing taken, when too many accepted events wait or the journal cannot be
        written (ask the sender to retry). Raises ``ValueError`` as :meth:`emit` does. An event
        whose ``delivery_id`` was accepted already is ``True`` and not taken twice."""
        ...

    def report_failure(self, reason: str) -> None:
        """Tell the runtime the source failed (a poll answered 500, the network is down):
        ``status`` shows ``reason`` with secrets removed, and counts failures in a row."""
        ...

    def report_success(self) -> None:
        """Tell the runtime the source works again (a poll answered, the listener is up):
        the count of failures in a row starts over."""
        ...

    def setting(self, *names: str, default: str | None = None) -> str | None:
        """The first of ``names`` set in ``secrets`` or ``config`` (in that order), else the
        environment, else ``default`` — the lookup every built-in connector uses."""
        ...

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> Awaitable[TurnAnswer]:
        """Deliver ``event`` as :meth:`emit` does (waiting for a place in flight); what it
        returns resolves when the Turn the event started ends, with that Turn's answer (or
        why there is none), so a connector can answer back where the event came from. An
        event sent again after a restart of the connector or the daemon resolves no waiter."""
        ...
