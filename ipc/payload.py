"""The typed payloads of the protocol (:mod:`ipc.protocol`): what every payload struct shares.

A payload is a ``msgspec`` struct built into its envelope with ``to_wire`` and read back with
``from_wire``; :class:`EventBody` is the payload of one event kind. The structs themselves live by
what they carry: :mod:`ipc.delegation` (``delegate``, ``delegate_result``, ``shutdown``),
:mod:`ipc.events` (what a process reports or is told) and :mod:`ipc.questions` (what one side
asks the other, and each answer).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, NamedTuple, Self, TypeVar

import msgspec

from ipc.messages import IpcError
from ipc.protocol import EventKind, MalformedPayload

_T = TypeVar("_T", bound="Payload")
_FIELD_AT = re.compile(r"at `\$\.(\w+)|missing required field `(\w+)`")


def _error_from_wire(kind: type, value: Any) -> Any:
    """msgspec's ``dec_hook``: an error crosses as ``{code, message, details?}``."""
    if kind is IpcError:
        return IpcError.from_dict(value)
    raise NotImplementedError(kind)


def _error_to_wire(value: Any) -> Any:
    """msgspec's ``enc_hook``: the wire form of an error."""
    if isinstance(value, IpcError):
        return value.to_dict()
    raise NotImplementedError(type(value))


def malformed(what: str, exc: msgspec.ValidationError) -> MalformedPayload:
    """``exc`` as the protocol's error, naming the first field of msgspec's path."""
    found = _FIELD_AT.search(str(exc))
    if found is None:
        return MalformedPayload(f"{what}: {exc}")
    name = found.group(1) or found.group(2)
    return MalformedPayload(f"{what}.{name}: {exc}", details={"field": name})


class Payload(msgspec.Struct, rename="camel", frozen=True, omit_defaults=True):
    """A payload (or the body of an event): a typed struct, camel-cased on the wire.

    Unknown fields are ignored (``forbid_unknown_fields`` stays off): a newer peer may add one
    and this side must still read the rest, as every reader of this protocol always did.
    """

    def to_wire(self) -> dict[str, Any]:
        """The payload object (for an event, its fields without ``kind``)."""
        # a hook (any keyword argument, even None) costs msgspec a microsecond: only when needed
        for name in _rules(type(self)).errors:
            if getattr(self, name) is not None:
                wire: dict[str, Any] = msgspec.to_builtins(self, enc_hook=_error_to_wire)
                return wire
        plain: dict[str, Any] = msgspec.to_builtins(self)
        return plain

    @classmethod
    def _convert(cls: type[_T], data: Any, what: str) -> _T:
        rules = _rules(cls)
        try:
            if type(data) is dict and not rules.error_keys.isdisjoint(data):  # see to_wire
                body = msgspec.convert(data, cls, dec_hook=_error_from_wire)
            else:
                body = msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise malformed(what, exc) from None
        return body._normalised() if rules.if_empty or rules.not_negative else body

    def _normalised(self) -> Self:
        """The payload as the protocol always read it (see :func:`_rules`)."""
        if_empty, not_negative, _, _ = _rules(type(self))
        changes = {name: value for name, value in if_empty if getattr(self, name) == ""}
        changes.update({name: 0 for name in not_negative if getattr(self, name) < 0})
        return msgspec.structs.replace(self, **changes) if changes else self


class _Rules(NamedTuple):
    """What :func:`_rules` found for one payload struct."""

    if_empty: tuple[tuple[str, Any], ...]
    """Fields whose empty text reads as another value, and that value."""
    not_negative: tuple[str, ...]
    """Counts that read a negative number as 0."""
    errors: tuple[str, ...]
    """The fields that hold an :class:`IpcError`."""
    error_keys: frozenset[str]
    """Their names on the wire."""


_RULES: dict[type[Payload], _Rules] = {}


def _rules(cls: type[Payload]) -> _Rules:
    """How the protocol always read the fields of ``cls``, found once from their types: an empty
    text reads as the field's default (an empty instance key is the default one), an empty
    optional text as ``None``, a negative count as 0. And the fields that hold an
    :class:`IpcError` (only one that holds one needs msgspec's hooks, which double its time)."""
    rules = _RULES.get(cls)
    if rules is None:
        fields = msgspec.structs.fields(cls)
        errors = [f for f in fields if f.type in (IpcError, IpcError | None)]
        rules = _RULES[cls] = _Rules(
            tuple((f.name, f.default) for f in fields if isinstance(f.default, str) and f.default)
            + tuple((f.name, None) for f in fields if f.type == str | None),
            tuple(f.name for f in fields if f.type is int),
            tuple(f.name for f in errors),
            frozenset(f.encode_name for f in errors),
        )
    return rules


def find_every_rule() -> None:
    """Find the rules of every payload struct defined so far. The agents' fork server calls it
    before it freezes its heap, so each child reads them shared instead of finding them again on
    its first messages (about 1 ms of an agent's start) and copying the pages they land on."""
    pending: list[type[Payload]] = [Payload]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        _rules(cls)


class Outcome(NamedTuple):
    """How an answer that is a result or an ``error`` says which on the wire."""

    field: str
    ok: bool | str
    """Its value for a result."""
    failed: bool | str
    """Its value for an error."""
    absent: bool | str
    """What the first readers of this protocol took its absence for."""
    fallback: str
    """The error message of a refusal that carries no error."""


class EventBody(Payload, frozen=True):
    """The payload of one event kind (``payload = {"kind": KIND, **to_wire()}``)."""

    KIND: ClassVar[EventKind]
    _OUTCOME: ClassVar[Outcome | None] = None
    """Set for an answer that holds a result or an ``error``."""

    def to_wire(self) -> dict[str, Any]:
        """The payload's fields, without ``kind``."""
        wire = super().to_wire()
        if self._OUTCOME is None:
            return wire
        said = self._OUTCOME.ok if getattr(self, "error", None) is None else self._OUTCOME.failed
        return {self._OUTCOME.field: said, **wire}

    @classmethod
    def from_wire(cls, data: Any, what: str) -> EventBody:
        """The body from a payload (``kind`` checked already); raises :class:`MalformedPayload`."""
        body = cls._convert(data, what)
        if cls._OUTCOME is None:
            return body
        field, ok, failed, absent, fallback = cls._OUTCOME
        said = data.get(field, absent)
        if type(said) is not type(ok):
            got = type(said).__name__
            raise MalformedPayload(
                f"{what}.{field}: Expected `{type(ok).__name__}`, got `{got}` - at `$.{field}`",
                details={"field": field},
            )
        error = getattr(body, "error", None)
        if said != failed:  # a result: an error beside it was never read
            return body if error is None else msgspec.structs.replace(body, error=None)
        return (
            body if error is not None else msgspec.structs.replace(body, error=IpcError(fallback))
        )


NotNegative = Annotated[float, msgspec.Meta(ge=0)]
"""A price or cost: a negative one is refused."""
