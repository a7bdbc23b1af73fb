"""Helpers shared by the built-in tools: reading handler input and Tool config.

Handlers re-check their input although the executor validates it against the export's JSON
Schema first: a handler may be called directly (tests, other tools), and the messages follow
upstream's wording (``'<key>' must be ...``). Every input problem raises
:class:`~tools_base.ToolError` with code ``E_TOOL_INVALID_ARGS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolConfigError, ToolError

INVALID_ARGS = ToolCode.E_TOOL_INVALID_ARGS


def invalid_arg(message: str, suggestion: str | None = None) -> ToolError:
    """A :class:`ToolError` for a bad argument."""
    return ToolError(message, code=INVALID_ARGS, suggestion=suggestion)


def require_string(data: JsonObject, key: str) -> str:
    """``data[key]`` as a non-empty string."""
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise invalid_arg(f"{key!r} must be a non-empty string")
    return value


def optional_string(data: JsonObject, key: str) -> str | None:
    """``data[key]`` as a string, or ``None`` when absent or null."""
    return _optional(data, key, _as_string, "a string")


def optional_number(data: JsonObject, key: str) -> float | int | None:
    """``data[key]`` as a finite number (``bool`` is not a number), or ``None``."""
    return _optional(data, key, _as_number, "a valid number")


def optional_bool(data: JsonObject, key: str, default: bool) -> bool:
    """``data[key]`` as a boolean, or ``default`` when absent or null."""
    value = _optional(data, key, _as_bool, "a boolean")
    return default if value is None else value


def optional_string_list(data: JsonObject, key: str) -> list[str] | None:
    """``data[key]`` as a list of strings, or ``None``."""
    return _optional(data, key, _as_string_list, "an array of strings")


def optional_object(data: JsonObject, key: str) -> JsonObject | None:
    """``data[key]`` as a JSON object, or ``None``."""
    return _optional(data, key, _as_object, "a JSON object")


_T = TypeVar("_T")


def _optional(
    data: JsonObject, key: str, read: Callable[[JsonValue], _T | None], kind: str
) -> _T | None:
    """``data[key]`` as ``read`` takes it, ``None`` when absent or null; the error saying it
    must be ``kind`` when ``read`` does not take it."""
    value = data.get(key)
    if value is None:
        return None
    found = read(value)
    if found is None:
        raise invalid_arg(f"{key!r} must be {kind}")
    return found


def _as_string(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _as_number(value: JsonValue) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def _as_bool(value: JsonValue) -> bool | None:
    return value if isinstance(value, bool) else None


def _as_string_list(value: JsonValue) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return [item for item in value if isinstance(item, str)]


def _as_object(value: JsonValue) -> JsonObject | None:
    return value if isinstance(value, dict) else None


def positive_int(data: JsonObject, key: str, default: int) -> int:
    """``data[key]`` as a number ≥ 1 (fractions truncated), or ``default``."""
    value = optional_number(data, key)
    if value is None:
        return default
    if value < 1:
        raise invalid_arg(f"{key!r} must be greater than 0")
    return int(value)


def primitive_to_string(value: JsonValue) -> str | None:
    """JavaScript's ``String(v)`` for strings, numbers and booleans; ``None`` otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return None


class ConfigReader:
    """Reads a Tool's ``config`` object strictly: wrong types and unknown keys are errors.

    Call the typed getters for every key the Tool knows, then :meth:`finish`, which rejects
    whatever is left (a misspelt ``allowOutsideWorkDir`` must not silently keep the default).
    """

    def __init__(self, tool: str, config: JsonObject) -> None:
        if not isinstance(config, dict):
            raise ToolConfigError(f"{tool} config must be an object, got {type(config).__name__}")
        self._tool = tool
        self._config = config
        self._seen: set[str] = set()

    def _error(self, key: str, expected: str) -> ToolConfigError:
        got = self._config.get(key)
        return ToolConfigError(f"{self._tool} config {key!r} must be {expected}, got {got!r}")

    def flag(self, key: str, default: bool) -> bool:
        """A boolean key."""
        self._seen.add(key)
        value = self._config.get(key, default)
        if not isinstance(value, bool):
            raise self._error(key, "a boolean")
        return value

    def integer(self, key: str, default: int, *, minimum: int = 1) -> int:
        """An integer key ≥ ``minimum``."""
        self._seen.add(key)
        value = self._config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._error(key, f"an integer >= {minimum}")
        return value

    def strings(self, key: str) -> list[str]:
        """A list of non-empty strings (default empty)."""
        self._seen.add(key)
        value = self._config.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self._error(key, "a list of non-empty strings")
        return [v for v in value if isinstance(v, str)]

    def raw(self, key: str) -> JsonValue:
        """The key's value as given (``None`` when absent), for a caller that checks it itself."""
        self._seen.add(key)
        return self._config.get(key)

    def finish(self) -> None:
        """Reject keys no getter asked for."""
        unknown = sorted(set(self._config) - self._seen)
        if unknown:
            known = ", ".join(sorted(self._seen)) or "none"
            raise ToolConfigError(
                f"{self._tool} config has unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known keys: {known}"
            )
