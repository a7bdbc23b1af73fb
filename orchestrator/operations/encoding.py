"""The one way answers become bytes, and bytes answers again.

:func:`encode` writes what Starlette's ``JSONResponse`` always wrote (Python's ``json``, no
spaces, UTF-8 as it is, no NaN), so the bodies stay byte for byte what clients have read:
msgspec's own JSON encoder spells some floats differently (``2e-6`` for ``2e-06``).
:func:`decode` reads a body into its struct (raising :class:`msgspec.ValidationError` for
one that is not it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

import msgspec

from orchestrator.operations.answers import Answer

T = TypeVar("T")


def plain(answer: Answer | Sequence[Answer]) -> object:
    """``answer`` as JSON-ready builtins (dicts, lists, strings, numbers)."""
    return msgspec.to_builtins(answer)


def encode(answer: Answer) -> bytes:
    """The body of ``answer``."""
    return encode_wire(plain(answer))


def encode_wire(data: object) -> bytes:
    """The body of JSON-ready ``data`` (a payload's wire form), written as :func:`encode`
    writes an answer."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def decode(body: bytes | str, kind: type[T]) -> T:
    """The struct of type ``kind`` a body holds; raises :class:`msgspec.ValidationError`
    (or :class:`msgspec.DecodeError` for text that is not JSON)."""
    return msgspec.json.decode(body, type=kind)


def convert(data: object, kind: type[T]) -> T:
    """The struct of type ``kind`` that JSON-shaped ``data`` (camelCase keys) holds; raises
    :class:`msgspec.ValidationError`."""
    return msgspec.convert(data, kind)
