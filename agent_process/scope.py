"""Who runs and where: one frozen object for a Turn, one for each of its Steps.

A Turn builds one :class:`TurnScope`; each Step wraps it in a :class:`StepScope`. Middleware
contexts, the executor, the event recorder and the Turn loop all read identity (agent,
instance, Turn, trace) and shared services (logger, runtime, recorder) from these objects
instead of each keeping copies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

from agent_process.events import EventRecorder, EventSink, new_span_id
from goondan.usage import Usage
from tools_base import AgentToolRuntime
from tools_base._pinned import PinnedDir

T = TypeVar("T")


class TurnCancelled(Exception):
    """The Turn's request was cancelled; raised at a safe point, ends the Turn ``CANCELLED``."""


class Cancellation:
    """Whether an operator cancelled the Turn's request, read at the Turn's safe points.

    The Turn stops before its next model call, and each tool call not yet started is answered
    ``E_TOOL_CANCELLED``; a tool call already running finishes (its effects are real, its
    result goes into the conversation). Only work without effects, such as a model call, is
    abandoned midway: see :meth:`abortable`.
    """

    __slots__ = ("_abortable", "boundary", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        """Why it was cancelled; ``None`` while it was not."""
        self.boundary: str | None = None
        """Why it should stop at its next Step boundary (see :meth:`interrupt`)."""
        self._abortable: asyncio.Task[object] | None = None

    @property
    def requested(self) -> bool:
        """The Turn should stop at its next safe point."""
        return self.reason is not None

    @property
    def interrupted(self) -> bool:
        """The Turn was asked to stop at its next Step boundary."""
        return self.boundary is not None

    def interrupt(self, reason: str) -> None:
        """Stop at the next Step boundary only: unlike :meth:`request`, the Step under way
        finishes whole (its model call, its tool calls, an approval it waits for)."""
        if self.boundary is None:
            self.boundary = reason

    def request(self, reason: str) -> None:
        """Cancel: abandon the abortable wait under way, if any."""
        if self.reason is None:
            self.reason = reason
            if self._abortable is not None:
                self._abortable.cancel()

    def check(self) -> None:
        """A safe point between Steps: raise :class:`TurnCancelled` if cancelled or
        interrupted."""
        reason = self.reason if self.reason is not None else self.boundary
        if reason is not None:
            raise TurnCancelled(reason)

    async def abortable(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``, abandoned (:class:`TurnCancelled`) if the Turn is cancelled
        meanwhile. Only for work whose abandonment leaves nothing half done. An interrupt
        does not abandon it: the Step it belongs to finishes."""
        if self.reason is not None:
            raise TurnCancelled(self.reason)
        task = asyncio.current_task()
        self._abortable = task
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.reason is None or task is None:
                raise
            if task.uncancel() > 0:  # someone else cancelled the task too: theirs wins
                raise
            raise TurnCancelled(self.reason) from None
        finally:
            self._abortable = None


TextSink = Callable[[str, str], None]
"""``(step_id, text)``: where the model text of a streamed Turn goes as it is produced."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnScope:
    """What every Step and every tool call of one Turn shares; built once per Turn."""

    agent_name: str
    """Name of the Agent resource running the Turn."""
    instance_key: str
    """Conversation instance of that agent (``"default"`` unless the caller chose one)."""
    turn_id: str
    """Id of the Turn (``turn-`` and 12 hex digits)."""
    trace_id: str
    """32-hex trace id, kept across every handoff of one causal chain."""
    workdir: Path
    """The instance workspace; file-system tools resolve relative paths against it."""
    workdir_pin: PinnedDir | None = None
    """``workdir`` opened once when the instance loaded: the tools work through it."""
    logger: FilteringBoundLogger
    """Structured logger bound to agent, instance, trace and Turn."""
    runtime: AgentToolRuntime | None = None
    """Inter-agent API of this Turn; ``None`` where no Orchestrator is attached."""
    events: EventSink | None = None
    """Where the Turn's runtime events go; ``None`` records none."""
    span_id: str = field(default_factory=new_span_id)
    """Span of the Turn: the parent of its Steps' spans."""
    parent_span_id: str | None = None
    """The caller's tool span for a delegated Turn; ``None`` for fresh input."""
    text_sink: TextSink | None = None
    """Set when the Turn's caller streams: every Step's model call streams into it. ``None``
    (a caller that does not stream) keeps model calls non-streaming."""
    started: float = field(default_factory=time.perf_counter)
    """``time.perf_counter()`` when the Turn began; durations count from here."""
    inbound: Mapping[str, str] = field(default_factory=dict)
    """Properties of the connector event that started the Turn (empty for other input)."""
    cancellation: Cancellation = field(default_factory=Cancellation, compare=False)
    """Set when the Turn's request is cancelled; read at the Turn's safe points."""
    usage: Usage = field(default_factory=Usage, compare=False)
    """What the Turn's model calls used so far (held against the turn budget)."""
    instance_usage: Usage = field(default_factory=Usage, compare=False)
    """What the conversation instance's model calls ever used, this Turn's included (held
    against the instance budget; the instance keeps it in its ``metadata.json``)."""
    recorder: EventRecorder = field(init=False, repr=False, compare=False)
    """Stamps the Turn's events with its agent, instance and trace; derived from the above."""

    def __post_init__(self) -> None:
        # A frozen dataclass sets derived fields only through object.__setattr__.
        recorder = EventRecorder(
            self.events,
            agent_name=self.agent_name,
            instance_key=self.instance_key,
            trace_id=self.trace_id,
        )
        object.__setattr__(self, "recorder", recorder)

    def elapsed_ms(self) -> float:
        """Milliseconds since the Turn began."""
        return (time.perf_counter() - self.started) * 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class StepScope:
    """What every tool call of one Step shares: its Turn, its position and its allowlist."""

    turn: TurnScope
    """The Turn this Step belongs to."""
    index: int
    """Position of the Step in its Turn, from 0."""
    span_id: str = field(default_factory=new_span_id)
    """Span of the Step: the parent of its tool calls' spans."""
    allowlist: frozenset[str] = frozenset()
    """Names in the Step's final catalog, the only tools its calls may run. Empty until the
    Step's middleware has settled the catalog; the Step then sets it with
    ``dataclasses.replace``."""
    id: str = field(init=False)
    """``{turn_id}-step-{index}``: names the Step in messages and events."""

    def __post_init__(self) -> None:
        # A frozen dataclass sets derived fields only through object.__setattr__.
        object.__setattr__(self, "id", f"{self.turn.turn_id}-step-{self.index}")
