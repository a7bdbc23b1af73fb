"""Whether a Tool's parameters are a valid JSON Schema, with verdicts kept per schema."""

from __future__ import annotations

import json
import math
import threading

import jsonschema
from jsonschema.exceptions import SchemaError


def schema_problem(schema: dict[str, object]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (with where), or ``None`` if it is one.

    Checking a schema against its metaschema costs milliseconds, and every bundle load checks
    the built-in packages' schemas again, so verdicts are kept per schema: keyed by its JSON
    text, for schemas that are plain JSON data (string keys; YAML can hold more, and those are
    checked every time), so one text always stands for one value.
    """
    if not _plain_json(schema):
        return _check_schema(schema)
    text = json.dumps(schema, allow_nan=False)
    with _schema_lock:
        if text in _schema_problems:
            return _schema_problems[text]
    problem = _check_schema(schema)
    with _schema_lock:
        if len(_schema_problems) >= 4096:
            _schema_problems.clear()
        _schema_problems[text] = problem
    return problem


_schema_problems: dict[str, str | None] = {}
_schema_lock = threading.Lock()


def _plain_json(value: object) -> bool:
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    return False


def _check_schema(schema: dict[str, object]) -> str | None:
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return exc.message + (f" (at {where})" if where else "")
    return None
