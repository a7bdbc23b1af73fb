"""Every error code of the runtime, once, with its meaning and what to do about it; and the
exception tree they hang from.

Codes come in four catalogues, one per audience:

* :data:`CONFIG` — what ``validate`` and ``run`` say about a goondan.yaml (``E_CONFIG_*``);
* :data:`TOOL` — the ``error.code`` of a tool result, what the model reads and acts on;
* :data:`DELIVERY` — why a request to an agent got no answer from a Turn, or the Turn failed;
  what a calling agent, the CLI or an API client gets;
* :data:`HTTP` — the ``error.code`` of the HTTP API's and the studio's own refusals (an answer
  that carries a request's failure uses its :data:`DELIVERY` code); sites name them as
  :class:`HttpCode` members, so a code outside the catalogue fails the type checker;
* :data:`CLI_EXIT` — the exit statuses of the ``goondan`` command.

A code outside these catalogues fails the test suite; the documentation's tables
(``docs/reference/error-codes.md``) are generated from them (``python -m goondan.errors``).

Exceptions follow the same split (in the style of httpx): :class:`GoondanError` is the root of
every error raised on purpose, with :class:`ConfigError`, :class:`ToolFailure`,
:class:`DeliveryError`, :class:`StorageError`, :class:`ModelFailure` and :class:`DaemonError`
below it. Each carries its ``code``.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

# re-exported: the catalogues' users import everything about codes from here
from goondan.error_codes import ConfigCode as ConfigCode
from goondan.error_codes import DeliveryCode as DeliveryCode
from goondan.error_codes import ToolCode as ToolCode
from goondan.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from goondan.catalogue import HELP_URL as HELP_URL
    from goondan.catalogue import Audience as Audience
    from goondan.catalogue import Catalogue as Catalogue
    from goondan.catalogue import ErrorCode as ErrorCode
    from goondan.error_meanings import CONFIG as CONFIG
    from goondan.error_meanings import DELIVERY as DELIVERY
    from goondan.error_meanings import TOOL as TOOL
    from goondan.http_codes import HTTP as HTTP
    from goondan.http_codes import HttpCode as HttpCode

    CATALOGUES: tuple[Catalogue, ...]
else:

    def __getattr__(name: str) -> object:
        """The catalogues (and what they are made of) when first asked for: the codes and the
        exceptions cost a command that only reports an exit status (the CLI) little, the
        catalogues' meanings a good part of its start."""
        if name != "CATALOGUES":
            return _reexported(name)
        value = globals()[name] = _catalogues()
        return value


_CATALOGUE_HOMES = {
    **dict.fromkeys(("HELP_URL", "Audience", "Catalogue", "ErrorCode"), "goondan.catalogue"),
    **dict.fromkeys(("CONFIG", "DELIVERY", "TOOL"), "goondan.error_meanings"),
    **dict.fromkeys(("HTTP", "HttpCode"), "goondan.http_codes"),
}
"""Where each name the module re-exports lazily lives."""
if not TYPE_CHECKING:
    _reexported = lazy_getattr(__name__, _CATALOGUE_HOMES)


class ExitCode(enum.IntEnum):
    """The exit statuses of ``goondan`` (as the original runtime's), by meaning; a failing
    command with ``--json`` prints the same number as ``exitCode``."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    CONFIG = 3
    VALIDATION = 4
    NETWORK = 5
    AUTH = 6
    INTERRUPTED = 130

    @property
    def error_name(self) -> str:
        """``CONFIG_ERROR`` style name, as ``--json`` output carries it."""
        special = {"OK": "OK", "USAGE": "INVALID_ARGUMENT", "INTERRUPTED": "INTERRUPTED"}
        return special.get(self.name, f"{self.name}_ERROR")


CLI_EXIT: Mapping[int, str] = {
    ExitCode.OK: "done",
    ExitCode.INTERNAL: "failed: an internal error, a request refused or failed, a daemon or "
    "cluster that refuses to start",
    ExitCode.USAGE: "usage error: an unknown command or option, two configurations, a missing "
    "--env-file, init over existing files",
    ExitCode.CONFIG: "the configuration cannot be read (no goondan.yaml, unparsable YAML)",
    ExitCode.VALIDATION: "the configuration is invalid (validate --strict: or has warnings)",
    ExitCode.NETWORK: "nobody answers: no daemon running, a daemon gone silent after taking "
    "the request, a cluster or model provider out of reach",
    ExitCode.AUTH: "a credential is missing or refused: a Model's API key or a Connection's "
    "secret (doctor names it), an API token, the cluster's credentials, key or certificate, "
    "a NATS server admitting clients without credentials",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}
"""Exit statuses of ``goondan``."""


def _catalogues() -> tuple[Catalogue, ...]:
    """Every catalogue (``CATALOGUES``): configuration, tool, delivery, HTTP."""
    from goondan.error_meanings import CONFIG, DELIVERY, TOOL
    from goondan.http_codes import HTTP

    return (CONFIG, TOOL, DELIVERY, HTTP)


def known(code: str) -> bool:
    """Whether ``code`` is in a catalogue."""
    return any(code in catalogue for catalogue in _catalogues())


def describe(code: str) -> ErrorCode | None:
    """The catalogue entry of ``code``, whichever audience it belongs to."""
    for catalogue in _catalogues():
        if code in catalogue:
            return catalogue[code]
    return None


# -- the exception tree ----------------------------------------------------------------------------


class GoondanError(Exception):
    """The root of every error the runtime raises on purpose; :attr:`code` is in a catalogue."""

    code: str = DeliveryCode.E_INTERNAL


class ConfigError(GoondanError):
    """A configuration cannot be loaded or used (:data:`CONFIG`)."""

    code: str = ConfigCode.E_CONFIG_SCHEMA_INVALID


class ToolFailure(GoondanError):
    """A tool call failed in a way the model can act on (:data:`TOOL`)."""

    code: str = ToolCode.E_TOOL


class DeliveryError(GoondanError):
    """A request to an agent got no Turn's answer, or its Turn failed (:data:`DELIVERY`)."""

    code: str = DeliveryCode.IPC_ERROR


class StorageError(GoondanError):
    """State on disk could not be written or read."""

    code: str = DeliveryCode.E_STORAGE


def newer_format(path: object, record: str, version: object, supported: int) -> str | None:
    """Why a stored ``record`` (``"metadata"``, ``"conversation"``, ...) at ``path`` is refused
    when its format ``version`` is newer than the ``supported`` one this runtime reads, so it
    is named instead of misread; ``None`` when it is readable."""
    if isinstance(version, int) and not isinstance(version, bool) and version > supported:
        return (
            f"{path} is in {record} format {version}; this runtime reads up to {supported}: "
            "upgrade goondan"
        )
    return None


class ModelFailure(GoondanError):
    """The model provider failed; the Turn fails with the code."""

    code: str = DeliveryCode.E_MODEL


class DaemonError(GoondanError):
    """The CLI could not reach a daemon, or the daemon refused to start."""

    code: str = DeliveryCode.E_INTERNAL


def _main() -> None:
    """Print the tables of docs/reference/error-codes.md."""
    titles = ("Configuration errors", "Tool results", "Requests to agents", "HTTP API refusals")
    for title, catalogue in zip(titles, _catalogues(), strict=True):
        print(f"## {title}\n\n{catalogue.markdown()}\n")
    print("## Exit statuses of `goondan`\n\n| status | meaning |\n|---|---|")
    for status, meaning in CLI_EXIT.items():
        print(f"| {status} | {meaning} |")


if __name__ == "__main__":
    _main()
    sys.exit(0)
