"""Configuration issues: every problem names the file, line, resource, field and a fix.

Loading never stops at the first problem: issues are collected and raised together as one
:class:`BundleError`, so a user fixes a file in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goondan.errors import HELP_URL, ConfigCode, ConfigError

E_FILE_NOT_FOUND = ConfigCode.E_CONFIG_FILE_NOT_FOUND
E_FILE_TOO_LARGE = ConfigCode.E_CONFIG_FILE_TOO_LARGE
E_TOO_MANY_DOCUMENTS = ConfigCode.E_CONFIG_TOO_MANY_DOCUMENTS
E_PARSE_ERROR = ConfigCode.E_CONFIG_PARSE_ERROR
E_UNSUPPORTED_API_VERSION = ConfigCode.E_CONFIG_UNSUPPORTED_API_VERSION
E_UNKNOWN_KIND = ConfigCode.E_CONFIG_UNKNOWN_KIND
E_INVALID_NAME = ConfigCode.E_CONFIG_INVALID_NAME
E_DUPLICATE_NAME = ConfigCode.E_CONFIG_DUPLICATE_NAME
E_PACKAGE_DOC_DUPLICATED = ConfigCode.E_CONFIG_PACKAGE_DOC_DUPLICATED
E_PACKAGE_DOC_POSITION = ConfigCode.E_CONFIG_PACKAGE_DOC_POSITION
E_PACKAGE_NOT_INSTALLED = ConfigCode.E_CONFIG_PACKAGE_NOT_INSTALLED
E_INVALID_REF = ConfigCode.E_CONFIG_INVALID_REF
E_REF_NOT_FOUND = ConfigCode.E_CONFIG_REF_NOT_FOUND
E_SCHEMA_INVALID = ConfigCode.E_CONFIG_SCHEMA_INVALID
E_ENTRY_NOT_FOUND = ConfigCode.E_CONFIG_ENTRY_NOT_FOUND
E_OUTSIDE_BUNDLE = ConfigCode.E_CONFIG_OUTSIDE_BUNDLE
E_ENTRY_LOAD_FAILED = ConfigCode.E_CONFIG_ENTRY_LOAD_FAILED
E_HANDLER_MISSING = ConfigCode.E_CONFIG_HANDLER_MISSING
E_SWARM_NOT_FOUND = ConfigCode.E_CONFIG_SWARM_NOT_FOUND


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigIssue:
    """One problem in a goondan.yaml (or a file it references)."""

    code: str
    """Upstream's code, for example ``E_CONFIG_REF_NOT_FOUND``."""
    message: str
    """What is wrong, naming the offending value (never a secret)."""
    file: Path | None = None
    """The YAML (or referenced) file; ``None`` for a problem of the bundle as a whole."""
    line: int | None = None
    """1-based line of the offending node, when known."""
    column: int | None = None
    """1-based column, known for YAML syntax errors."""
    resource: str | None = None
    """``Kind/name`` of the resource, for example ``Tool/bash``."""
    field: str | None = None
    """Path inside the resource, for example ``spec.exports[1].name``."""
    suggestion: str | None = None
    """What to do about it."""

    @property
    def help_url(self) -> str:
        """Documentation for :attr:`code`."""
        return HELP_URL.format(code=self.code)

    def location(self) -> str:
        """``goondan.yaml:42`` (``:42:7`` when the column is known; or the file, or ``<bundle>``)."""
        if self.file is None:
            return "<bundle>"
        name = _display_path(self.file)
        if self.line is None:
            return name
        return f"{name}:{self.line}" + (f":{self.column}" if self.column is not None else "")

    def format(self) -> str:
        """``goondan.yaml:42: Tool/bash: spec.exports[1].name: <message> (CODE)`` + a hint line."""
        parts = [self.location()]
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        text = ": ".join(parts) + f": {self.message} ({self.code})"
        if self.suggestion:
            text += f"\n  hint: {self.suggestion}"
        return text

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {
            "code": self.code,
            "message": self.message,
            "file": str(self.file) if self.file is not None else None,
            "line": self.line,
            "column": self.column,
            "resource": self.resource,
            "field": self.field,
            "suggestion": self.suggestion,
            "helpUrl": self.help_url,
        }


class BundleError(ConfigError):
    """A goondan.yaml could not be loaded; :attr:`errors` lists every problem found."""

    def __init__(self, errors: list[ConfigIssue]) -> None:
        self.errors = list(errors)
        if self.errors:
            self.code = self.errors[0].code
        super().__init__(self._summary())

    def _summary(self) -> str:
        count = len(self.errors)
        head = "\n".join(issue.format() for issue in self.errors[:20])
        more = f"\n... and {count - 20} more" if count > 20 else ""
        return f"{count} configuration error{'s' if count != 1 else ''}:\n{head}{more}"


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
