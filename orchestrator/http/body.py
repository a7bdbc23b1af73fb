"""The request bodies the HTTP API accepts, checked at the door.

A body is a JSON object of at most :data:`MAX_BODY_BYTES`. What a route takes from it travels
on to an agent as msgpack, so before a route reads a field, :func:`read_object` refuses (400,
naming the field) anything that could not make that trip or would mean something else on the
way: nesting deeper than :data:`MAX_DEPTH`, a string (value or key) holding a lone surrogate
(JSON's ``"\\ud800"`` escape: no character of any encoding), a number that is not finite
(``NaN``, ``Infinity``, ``1e400``) or an integer outside 64 bits. Each route then reads its own
fields with :class:`Fields`: their types and bounds, and (for the API's own routes) no field
it does not know, so a misspelt ``instancekey`` is an error instead of a silent default.
Nothing is queued for an agent until its body passed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from starlette.exceptions import HTTPException
from starlette.requests import Request

from goondan.defaults import DEFAULT_INSTANCE_KEY, MAX_REQUEST_TIMEOUT_MS
from goondan.errors import HttpCode

MAX_BODY_BYTES = 1024 * 1024
"""Largest request body accepted (413 past it)."""
MAX_DEPTH = 64
"""Deepest nesting of objects and lists a body may have (the body itself is level 1)."""
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack carries
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadBody(Exception):
    """A body refused at the door (400): ``field`` names what is wrong (``None``: the body)."""

    def __init__(self, field: str | None, message: str) -> None:
        # Both may quote what was sent, lone surrogates included: escaped, they can be answered.
        message = _printable(message)
        super().__init__(message)
        self.field = _printable(field) if field is not None else None
        self.message = message

    def to_json(self) -> dict[str, Any]:
        """``{"code": "BAD_REQUEST", "message", "field"?}``, the ``error`` of the answer."""
        out: dict[str, Any] = {"code": HttpCode.BAD_REQUEST, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


async def read_body(request: Request) -> bytes:
    """The body of ``request``, at most :data:`MAX_BODY_BYTES`; raises ``HTTPException(413)``
    past it (as soon as ``Content-Length`` says so, else once that much has come)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES} bytes")
    return bytes(body)


async def read_object(request: Request) -> dict[str, Any]:
    """The body of ``request`` as a checked JSON object (an empty body is ``{}``); raises
    ``HTTPException(413)`` past :data:`MAX_BODY_BYTES`, :class:`BadBody` for the rest."""
    return parse_object(await read_body(request))


def parse_object(body: bytes) -> dict[str, Any]:
    """``body`` as a checked JSON object (see the module docstring); raises :class:`BadBody`."""
    try:
        data = json.loads(body or b"{}")
    except RecursionError:  # the parser's own stack, far past MAX_DEPTH
        raise BadBody(None, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadBody(None, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadBody(None, "the body must be a JSON object")
    check_value(data)
    return data


def check_value(value: object, field: str = "") -> None:
    """Raise :class:`BadBody` naming the first part of ``value`` (at ``field``) that nests too
    deep, holds a lone surrogate, or is a number msgpack cannot carry (see the module
    docstring). Iterative, so a deep value cannot exhaust the stack; a path is only spelt
    out for the part refused, so a large body costs one pass and no string per value."""
    if not isinstance(value, dict | list):
        fault = _fault(value)
        if fault is not None:
            raise BadBody(field or None, f"{_name(field)} {fault}")
        return
    stack: list[_Entry] = [(value, 1, None, field)]
    while stack:
        entry = stack.pop()
        item, depth = entry[0], entry[1]
        if depth > MAX_DEPTH:
            where = _path(entry)
            raise BadBody(where or None, f"{_name(where)} nests deeper than {MAX_DEPTH} levels")
        pairs: Iterable[tuple[str | int, object]]
        if isinstance(item, dict):
            for key in item:
                if _SURROGATE.search(key) is not None:
                    _refuse(_path((None, 0, entry, key)), _fault(key))
            pairs = item.items()
        else:
            assert isinstance(item, list)
            pairs = enumerate(item)
        for key, inner in pairs:
            if isinstance(inner, dict | list):
                stack.append((inner, depth + 1, entry, key))
            else:
                fault = _fault(inner)
                if fault is not None:
                    _refuse(_path((inner, 0, entry, key)), fault)


_Entry = tuple[object, int, "_Entry | None", "str | int"]
"""A container met on the walk: ``(value, depth, parent, key in the parent)``."""


def _fault(value: object) -> str | None:
    """What is wrong with a scalar of a body, if anything."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        if found is not None:
            code = ord(found.group())
            return (
                f"holds a lone surrogate (U+{code:04X} at {found.start()}), "
                "which is no character: send text as valid UTF-8"
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            return "must be a finite number"
    elif isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
        return "is outside 64 bits"
    return None


def _path(entry: _Entry) -> str:
    """The field of ``entry``: ``messages[0].content``."""
    keys: list[str | int] = []
    root = ""
    current: _Entry | None = entry
    while current is not None:
        parent = current[2]
        if parent is None:
            root = str(current[3])
        else:
            keys.append(current[3])
        current = parent
    path = root
    for key in reversed(keys):
        path = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)
    return path


def _refuse(where: str, fault: str | None) -> NoReturn:
    raise BadBody(where or None, f"{_name(where)} {fault}")


def _name(where: str) -> str:
    return where or "the body"


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class Fields:
    """The fields of one checked body, read by one route.

    Each reader raises :class:`BadBody` naming its field when the value is of the wrong type
    or out of bounds. With ``known``, a field outside it is refused at once (the API's own
    routes); without, other fields are ignored (the OpenAI-compatible route, whose clients
    send many fields the swarm has no use for).
    """

    def __init__(self, data: dict[str, Any], known: Collection[str] | None = None) -> None:
        self.data = data
        if known is not None:
            unknown = sorted(set(data) - set(known))
            if unknown:
                expected = ", ".join(sorted(known)) or "none"
                raise BadBody(
                    unknown[0], f"unknown field {unknown[0]!r} (this route takes: {expected})"
                )

    def text(self, name: str) -> str | None:
        """A string field, if present."""
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise BadBody(name, f"{name} must be a string")
        return value

    def required_text(self, name: str) -> str:
        """A string field that must be present and not only white space."""
        value = self.text(name)
        if value is None or not value.strip():
            raise BadBody(name, f"{name} must be non-empty text")
        return value

    def instance_key(self, name: str = "instanceKey") -> str:
        """The conversation instance a request names (the default one when it names none)."""
        return self.text(name) or DEFAULT_INSTANCE_KEY

    def flag(self, name: str) -> bool:
        """A ``true``/``false`` field (``false`` when absent or ``null``)."""
        value = self.data.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise BadBody(name, f"{name} must be true or false")
        return value

    def timeout_ms(self, name: str = "timeoutMs") -> int | None:
        """A timeout in milliseconds: a whole number from 1 to
        :data:`~goondan.defaults.MAX_REQUEST_TIMEOUT_MS` (a week)."""
        value = self.data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadBody(name, f"{name} must be a whole number of milliseconds")
        if not 1 <= value <= MAX_REQUEST_TIMEOUT_MS:
            raise BadBody(name, f"{name} must be from 1 to {MAX_REQUEST_TIMEOUT_MS} (a week)")
        return value

    def mapping(self, name: str) -> dict[str, Any] | None:
        """A JSON object field."""
        value = self.data.get(name)
        if value is not None and not isinstance(value, dict):
            raise BadBody(name, f"{name} must be a JSON object")
        return value

    def required_items(self, name: str) -> list[Any]:
        """A JSON array field that must be present and not empty."""
        value = self.data.get(name)
        if not isinstance(value, list) or not value:
            raise BadBody(name, f"{name} must be a non-empty array")
        return value


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What ``/v1/chat/completions`` takes from its body; every other field is ignored."""

    model: str
    text: str
    """The last message's text: it must be the user's."""
    user: str | None
    stream: bool
    relay: bool
    include_usage: bool

    @classmethod
    def read(cls, data: dict[str, Any]) -> ChatRequest:
        """The request in a checked body; raises :class:`BadBody` naming the field."""
        fields = Fields(data)
        model = fields.required_text("model")
        messages = fields.required_items("messages")
        for index, message in enumerate(messages):
            where = f"messages[{index}]"
            if not isinstance(message, dict):
                raise BadBody(where, f"{where} must be a JSON object")
            if not isinstance(message.get("role"), str):
                raise BadBody(f"{where}.role", f"{where}.role must be a string")
            content = message.get("content")
            if content is not None and not isinstance(content, str | list):
                raise BadBody(f"{where}.content", f"{where}.content must be text or parts")
        where = f"messages[{len(messages) - 1}]"
        last = messages[-1]
        text = _message_text(last.get("content"), f"{where}.content")
        if last.get("role") != "user" or text is None:
            raise BadBody(where, f"{where}: messages must end with a user message with text")
        options = Fields(fields.mapping("stream_options") or {})
        return cls(
            model=model,
            text=text,
            user=fields.text("user") or None,
            stream=fields.flag("stream"),
            relay=fields.flag("relay"),
            include_usage=options.flag("include_usage"),
        )


def _message_text(content: object, where: str) -> str | None:
    """A message's text (a string, or the text of its ``text`` parts), when it has some."""
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise BadBody(f"{where}[{index}].text", f"{where}[{index}].text must be text")
                texts.append(text)
        content = "".join(texts)
    return content if isinstance(content, str) and content.strip() else None
