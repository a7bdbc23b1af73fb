"""What an error-code catalogue is: a code with its meaning and advice, and the codes of one
audience in the order they are documented. The catalogues themselves are in
:mod:`goondan.errors`."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import NamedTuple

HELP_URL = "https://docs.goondan.ai/errors/{code}"


class Audience(enum.StrEnum):
    """Who reads a code."""

    CONFIG = "config"
    TOOL = "tool"
    DELIVERY = "delivery"
    HTTP = "http"


class ErrorCode(NamedTuple):
    """One code: what it means and what to do about it.

    A named tuple rather than a dataclass: every CLI command imports this module, and
    ``dataclasses`` (with the ``inspect`` it imports) was a good part of its start.
    """

    code: str
    meaning: str
    suggestion: str | None = None

    @property
    def help_url(self) -> str:
        """Where the code is documented."""
        return HELP_URL.format(code=self.code)


class Catalogue(Mapping[str, ErrorCode]):
    """The codes of one audience, in the order they are documented."""

    def __init__(self, audience: Audience, *codes: ErrorCode) -> None:
        self.audience = audience
        self._codes = {entry.code: entry for entry in codes}
        if len(self._codes) != len(codes):
            raise ValueError(f"a code is listed twice in the {audience} catalogue")

    def __getitem__(self, code: str) -> ErrorCode:
        return self._codes[code]

    def __iter__(self) -> Iterator[str]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)

    def suggestion(self, code: str) -> str | None:
        """The catalogue's advice for ``code`` (``None`` for a code of another audience)."""
        entry = self._codes.get(code)
        return entry.suggestion if entry is not None else None

    def markdown(self) -> str:
        """The README table of this catalogue."""
        rows = ["| code | meaning | what to do |", "|---|---|---|"]
        for entry in self._codes.values():
            rows.append(f"| `{entry.code}` | {entry.meaning} | {entry.suggestion or ''} |")
        return "\n".join(rows)
