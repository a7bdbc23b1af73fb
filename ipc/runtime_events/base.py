"""What every runtime event carries (:class:`RuntimeEvent`), and the pieces its families share."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import msgspec
from msgspec import UNSET as UNSET
from msgspec import UnsetType

from ipc.runtime_events.types import EventType

T = TypeVar("T")

Number = int | float
"""A figure as its producer wrote it (``3`` stays ``3``, ``3.0`` stays ``3.0``)."""


def given(value: T | UnsetType | None) -> T | None:
    """``value``, or ``None`` when the event did not carry it."""
    return None if isinstance(value, UnsetType) else value


class TokenCounts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Tokens of one model call (a Step) or of a Turn's calls, in the event log's words.

    The runtime counts input and output tokens; an event spells them ``promptTokens`` and
    ``completionTokens`` as it always has.
    """

    input_tokens: int = msgspec.field(default=0, name="promptTokens")
    output_tokens: int = msgspec.field(default=0, name="completionTokens")
    total_tokens: int = msgspec.field(default=0, name="totalTokens")
    cost: Number | UnsetType = UNSET
    """What the tokens cost (absent without a price)."""

    @classmethod
    def read(cls, data: object) -> TokenCounts:
        """The counts of a ``tokenUsage`` object (a Turn's answer carries one too); none for
        anything that is not one."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError:
            return cls()


class RuntimeEvent(
    msgspec.Struct,
    tag_field="type",
    rename="camel",
    omit_defaults=True,
    forbid_unknown_fields=True,
):
    """What every runtime event carries: when, which agent, and its place in a trace.

    The producer's recorder stamps these; ``parentSpanId`` is absent for a span that starts its
    trace. Subclasses are the families; their subclasses the types (``type`` is the tag).
    """

    type: ClassVar[EventType]
    timestamp: str = ""
    agent_name: str = ""
    instance_key: str | UnsetType | None = UNSET
    trace_id: str | UnsetType | None = UNSET
    span_id: str | UnsetType = UNSET
    parent_span_id: str | UnsetType = UNSET

    @property
    def trace(self) -> str | None:
        """The trace id, ``None`` when the event has none."""
        return self.trace_id or None

    @property
    def instance(self) -> str | None:
        """The conversation instance, ``None`` when the event names none."""
        return self.instance_key or None

    @property
    def span(self) -> str | None:
        """The span the event opens or closes, if any."""
        return self.span_id or None

    @property
    def parent_span(self) -> str | None:
        """The span it hangs under, ``None`` for a trace's first span."""
        return self.parent_span_id or None

    def to_builtins(self) -> dict[str, Any]:
        """The event as the JSON object of its line."""
        built: dict[str, Any] = msgspec.to_builtins(self, enc_hook=str)
        return built
