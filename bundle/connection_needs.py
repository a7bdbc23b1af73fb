"""The environment variables a swarm's Connections need before their connectors can start.

A connector resolves its Connection's ``valueFrom`` values when its process starts, and looks
its settings up with ``ctx.setting``; a variable missing there makes it fail at boot and back
off, again and again, while the rest of the swarm runs. ``doctor`` and ``run`` check the same
names first (names only, never values), as they check Models' API keys (:mod:`bundle.keys`):

- every ``valueFrom`` of a Connection's ``config`` and ``secrets`` (for a ``secretRef``, any of
  the variables it is read from);
- every ``requiredSettings`` entry of its Connector, satisfied by a non-empty key of that name
  in the Connection's ``secrets`` or ``config``, or by the variable itself when the Connector
  declares it in ``spec.env`` (the connector process gets no other).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bundle.secrets import SecretUnavailable, secret_candidates
from bundle.spec_base import ValueSource
from bundle.spec_connector import ConnectionSpec, ConnectorSpec

if TYPE_CHECKING:
    from bundle.bundle import Bundle


@dataclass(frozen=True, slots=True)
class SettingNeed:
    """One setting a Connection needs from the environment: any of ``variables`` will do."""

    connection: str
    connector: str
    variables: tuple[str, ...]
    field: str | None
    """Where the Connection names it (``secrets.token``); ``None`` when its Connector requires
    the setting and the Connection does not give it."""

    def present(self, environ: Mapping[str, str]) -> bool:
        """Whether ``environ`` holds a non-empty value for one of :attr:`variables`."""
        return any(environ.get(name, "").strip() for name in self.variables)

    @property
    def names(self) -> str:
        """The variable, or ``one of A, B, C``."""
        if len(self.variables) == 1:
            return self.variables[0]
        return "one of " + ", ".join(self.variables)

    def problem(self) -> str:
        """What is missing, naming the Connection and the variable (never a value)."""
        where = f"its {self.field}" if self.field else f"Connector/{self.connector} requires it"
        return f"Connection/{self.connection} needs {self.names}, which is not set ({where})"

    def fix(self, where: str = "put it in .env beside goondan.yaml, or export it") -> str:
        """How to give it; ``where`` says where a variable goes (``put it ...``)."""
        first = self.variables[0]
        given = (
            ""
            if self.field
            else f", or give it in the Connection's secrets ({first}: {{valueFrom: {{env: ...}}}})"
        )
        return where.replace("put it", f"put {first}=...", 1) + given


def connection_needs(bundle: Bundle, swarm_name: str | None = None) -> list[SettingNeed]:
    """What the Connections bound to the swarm read from the environment, in file order."""
    swarm = bundle.swarm(swarm_name)
    needs: list[SettingNeed] = []
    for connection in bundle.of_kind("Connection"):
        spec: ConnectionSpec = connection.spec
        if spec.swarm_ref is not None and spec.swarm_ref.name != swarm.name:
            continue
        connector = bundle.resolve_ref(spec.connector_ref, connection)
        needs += [
            SettingNeed(connection.name, connector.name, variables, field)
            for variables, field in _needs_of(spec, connector.spec)
        ]
    return needs


def _needs_of(
    spec: ConnectionSpec, connector: ConnectorSpec
) -> list[tuple[tuple[str, ...], str | None]]:
    """``(variables, field)`` of each need of one Connection."""
    needs: list[tuple[tuple[str, ...], str | None]] = []
    for section in ("config", "secrets"):
        values: dict[str, ValueSource] = getattr(spec, section)
        for key, source in values.items():
            variables = _variables(source, key)
            if variables:
                needs.append((variables, f"{section}.{key}"))
    return needs + _required_needs(spec, connector)


def _required_needs(
    spec: ConnectionSpec, connector: ConnectorSpec
) -> list[tuple[tuple[str, ...], str | None]]:
    """The Connector's required settings the Connection does not give: the variables each
    may be read from (those the Connector declares, else all its names)."""
    needs: list[tuple[tuple[str, ...], str | None]] = []
    given = _given(spec)
    for entry in connector.required_settings:
        names = (entry,) if isinstance(entry, str) else tuple(entry)
        if any(name in given for name in names):
            continue  # given by the Connection; its valueFrom is checked above
        readable = tuple(n for n in names if _declared(n, connector.env))
        needs.append((readable or names, None))
    return needs


def _given(spec: ConnectionSpec) -> set[str]:
    """The keys the Connection gives a value or a ``valueFrom``."""
    return {
        key
        for key, source in [*spec.config.items(), *spec.secrets.items()]
        if source.value_from is not None or source.value
    }


def missing_settings(
    bundle: Bundle, swarm_name: str | None, environ: Mapping[str, str]
) -> list[SettingNeed]:
    """The needs of :func:`connection_needs` that ``environ`` does not meet."""
    return [n for n in connection_needs(bundle, swarm_name) if not n.present(environ)]


def _variables(source: ValueSource, key: str) -> tuple[str, ...]:
    """The variables a ``valueFrom`` is read from (none for a literal ``value``)."""
    if source.value_from is None:
        return ()
    if source.value_from.env is not None:
        return (source.value_from.env,)
    assert source.value_from.secret_ref is not None
    try:
        return tuple(secret_candidates(source.value_from.secret_ref, key))
    except SecretUnavailable:  # a malformed ref: validation names it
        return ()


def _declared(name: str, env: list[str]) -> bool:
    """Whether the Connector's ``spec.env`` lets its process read ``name``."""
    return any(
        name == entry or (entry.endswith("*") and name.startswith(entry[:-1])) for entry in env
    )
