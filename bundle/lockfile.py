"""``goondan.lock.yaml``: the exact versions, URLs and hashes a bundle's dependencies resolved to.

Upstream's shape, with Python's facts::

    lockfileVersion: 1
    packages:
      "@acme/tools@1.1.0":
        name: "@acme/tools"            # the Goondan package (a plain distribution: its name)
        distribution: acme-tools
        range: ^1.0.0                  # as the Package document said (direct dependencies only)
        version: 1.1.0
        resolved: https://.../acme_tools-1.1.0-py3-none-any.whl
        integrity: sha256-FP1e3ezVNArRgJx+cdTYSh3e9NTqutLYZFyO/kI8zH8=
        dependencies: {}               # distribution → version, entries of this file

Besides the direct dependencies it holds every distribution they added to the environment
when it was resolved, each pinned the same way, so ``pip install --require-hashes`` takes them
all. ``integrity`` is a Subresource Integrity string (upstream's format, with SHA-256: the
digest Python indexes publish).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bundle.packages import Dependency, canonicalize_name
from goondan.files import write_atomic

LOCKFILE = "goondan.lock.yaml"
LOCKFILE_VERSION = 1
_HEADER = (
    "# Written by `goondan package install` and `goondan package update`: do not edit.\n"
    "# Commit it: `goondan package install --frozen-lockfile` installs exactly this.\n"
)


class LockfileError(ValueError):
    """A lockfile that cannot be read (not YAML, another version, a field missing)."""


@dataclass(frozen=True, slots=True)
class LockedPackage:
    """One pinned distribution."""

    name: str
    distribution: str
    version: str
    resolved: str
    """The URL of the file that was hashed."""
    integrity: str
    """``sha256-<base64 of the digest>``."""
    range: str | None = None
    """The Package document's range it was resolved for; ``None`` for one pulled in."""
    dependencies: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Its key in ``packages``: ``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def sha256(self) -> str:
        """The digest in hex, as pip's ``--hash=sha256:`` takes it."""
        return integrity_hex(self.integrity)

    def as_dict(self) -> dict[str, Any]:
        """The entry as written."""
        entry: dict[str, Any] = {"name": self.name, "distribution": self.distribution}
        if self.range is not None:
            entry["range"] = self.range
        entry |= {"version": self.version, "resolved": self.resolved}
        entry |= {"integrity": self.integrity, "dependencies": dict(self.dependencies)}
        return entry


def integrity(sha256_hex: str) -> str:
    """The SRI string of a SHA-256 digest given in hex."""
    return "sha256-" + base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def integrity_hex(value: str) -> str:
    """The hex digest of an SRI ``sha256-...`` string (:class:`LockfileError` otherwise)."""
    algorithm, _, digest = value.partition("-")
    try:
        raw = base64.b64decode(digest, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if algorithm != "sha256" or len(raw) != 32:
        raise LockfileError(f"integrity {value!r} is not sha256-<base64 of 32 bytes>")
    return raw.hex()


@dataclass(frozen=True, slots=True)
class Lockfile:
    """The whole file: its packages, direct dependencies first."""

    packages: tuple[LockedPackage, ...]

    def direct(self, name: str) -> LockedPackage | None:
        """The entry of direct dependency ``name``."""
        return next((p for p in self.packages if p.range is not None and p.name == name), None)

    def render(self) -> str:
        """The YAML text."""
        body = {
            "lockfileVersion": LOCKFILE_VERSION,
            "packages": {p.key: p.as_dict() for p in self.packages},
        }
        return _HEADER + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)

    def write(self, path: Path) -> None:
        """Write it to ``path`` whole or not at all."""
        write_atomic(path, self.render().encode())


def read_lockfile(path: Path) -> Lockfile | None:
    """The lockfile at ``path``; ``None`` if there is none (:class:`LockfileError` if it
    cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockfileError(f"{path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LockfileError(f"{path} is not YAML: {exc}") from None
    if not isinstance(data, dict) or data.get("lockfileVersion") != LOCKFILE_VERSION:
        version = data.get("lockfileVersion") if isinstance(data, dict) else None
        raise LockfileError(
            f"{path}: lockfileVersion {version!r} is not {LOCKFILE_VERSION} "
            "(written by another version of goondan-py?)"
        )
    entries = data.get("packages") or {}
    if not isinstance(entries, dict):
        raise LockfileError(f"{path}: packages must be a mapping")
    packages = []
    for key, entry in entries.items():
        try:
            packages.append(_entry(entry))
        except (KeyError, TypeError, ValueError) as exc:
            raise LockfileError(f"{path}: packages.{key}: {exc}") from None
    return Lockfile(tuple(packages))


def _entry(entry: Any) -> LockedPackage:
    if not isinstance(entry, dict):
        raise TypeError("not a mapping")
    for name in ("name", "distribution", "version", "resolved", "integrity"):
        if not isinstance(entry.get(name), str) or not entry[name]:
            raise ValueError(f"{name} missing or not a string")
    integrity_hex(entry["integrity"])  # refused now, not halfway through an install
    range_ = entry.get("range")
    dependencies = entry.get("dependencies") or {}
    if range_ is not None and not isinstance(range_, str):
        raise TypeError("range is not a string")
    if not isinstance(dependencies, dict):
        raise TypeError("dependencies is not a mapping")
    return LockedPackage(
        name=entry["name"],
        distribution=canonicalize_name(entry["distribution"]),
        version=entry["version"],
        resolved=entry["resolved"],
        integrity=entry["integrity"],
        range=range_,
        dependencies={str(k): str(v) for k, v in dependencies.items()},
    )


def differences(dependencies: Sequence[Dependency], lockfile: Lockfile) -> list[str]:
    """How the Package document's dependencies and the lockfile disagree, one line each (none
    when the lockfile is up to date)."""
    found: list[str] = []
    declared = {d.name for d in dependencies}
    for dependency in dependencies:
        locked = lockfile.direct(dependency.name)
        if locked is None:
            found.append(
                f"{dependency.name} {dependency.range} is in the Package document, "
                f"not in {LOCKFILE}"
            )
        elif locked.range != dependency.range:
            found.append(
                f"{dependency.name}: the Package document asks for {dependency.range}, "
                f"{LOCKFILE} was resolved for {locked.range}"
            )
        elif locked.distribution != dependency.distribution:
            found.append(
                f"{dependency.name}: the Package document names distribution "
                f"{dependency.distribution}, {LOCKFILE} has {locked.distribution}"
            )
        elif not dependency.allows(locked.version):
            found.append(
                f"{dependency.name}: {LOCKFILE} pins {locked.version}, outside {dependency.range}"
            )
    for locked in lockfile.packages:
        if locked.range is not None and locked.name not in declared:
            found.append(f"{locked.name} is in {LOCKFILE}, not in the Package document")
    return found
