"""A Connection's ``config``, checked by its Connector's own module at ``validate``.

A connector module may define ``check_config(config)``: it gets the Connection's config values
(``None`` for one given by ``valueFrom``, known only when the connector starts) and returns its
problems, each ``(field, message)`` or ``(field, message, line)``: ``field`` is the path inside
the config (``schedules[1].timezone``), ``line`` a 1-based line inside that value's text. Each
becomes an issue naming the file, the line (inside a ``|`` block the line of the offending text
itself), the Connection and ``spec.config.<field>``.

The module is imported only when handlers are checked (``validate`` does, in a child process);
a module that cannot be imported, or has no ``check_config``, is passed over here: its connector
reports the problem when it starts.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bundle import errors as E
from bundle.entry import EntryLoadError, load_entry_module
from bundle.errors import ConfigIssue
from bundle.loader import Resource
from bundle.source import FieldPath, format_path
from bundle.spec_connector import ConnectionSpec, ConnectorSpec

HOOK = "check_config"
_BLOCK_LITERAL = re.compile(r"""^\s*["']?value["']?\s*:\s*\|[-+0-9]*\s*(#.*)?$""")
_HEAD = re.compile(r"^[^.\[]+")


def connection_config_issues(
    connection: Resource, connector: Resource, *, allow_outside_bundle: bool
) -> list[ConfigIssue]:
    """The problems ``connector``'s ``check_config`` finds in ``connection``'s config."""
    spec: ConnectionSpec = connection.spec
    connector_spec: ConnectorSpec = connector.spec
    entry = (connector.base_dir / connector_spec.entry).resolve()
    confined = allow_outside_bundle or entry.is_relative_to(connector.base_dir.resolve())
    if not confined or not entry.is_file():
        return []  # the Connector's own rules report its entry
    try:
        hook = getattr(load_entry_module(entry), HOOK, None)
    except EntryLoadError:
        return []
    if not callable(hook):
        return []
    try:
        problems = list(hook(literal_values(spec)))
    except Exception as exc:
        return [
            connection.issue(
                E.E_ENTRY_LOAD_FAILED,
                f"{HOOK}(config) of {entry.name} raised {type(exc).__name__}: {exc}",
                ("spec", "connectorRef"),
                suggestion="fix the connector module: checking a config must not raise",
            )
        ]
    return [_issue(connection, connector, problem) for problem in problems]


def _issue(connection: Resource, connector: Resource, problem: Iterable[Any]) -> ConfigIssue:
    field, message, *rest = problem
    inner_line = rest[0] if rest and isinstance(rest[0], int) else None
    head = _HEAD.match(str(field))
    key = head.group(0) if head else str(field)
    path: FieldPath = ("spec", "config", key)
    lines = connection.document.lines
    if (*path, "value") in lines:
        path = (*path, "value")
    issue = connection.issue(
        E.E_SCHEMA_INVALID,
        str(message),
        path,
        suggestion=f"fix the value: {connector.ref_string} documents its config",
    )
    line = issue.line
    if inner_line is not None and line is not None and _opens_block(connection.file, line):
        line += inner_line
    return dataclasses.replace(
        issue, line=line, field=format_path(("spec", "config")) + "." + field
    )


def _opens_block(file: Path, line: int) -> bool:
    """Whether ``line`` of ``file`` is ``value: |``: then the value's own lines follow it."""
    try:
        text = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return 0 < line <= len(text) and _BLOCK_LITERAL.match(text[line - 1]) is not None


def literal_values(spec: ConnectionSpec) -> Mapping[str, str | None]:
    """The config a ``check_config`` gets: literal values, ``None`` for a ``valueFrom``."""
    return {key: source.value for key, source in spec.config.items()}
