"""Resolving and installing a bundle's dependencies with pip, into the running interpreter's
environment (``sys.executable -m pip``: the environment goondan itself runs in).

Resolution asks pip what it would install (``pip install --dry-run --report``, pip's own
resolver and index configuration): first each direct dependency alone, ignoring what is
installed, so a newer version within the range is found even when an older one is there;
then all of them pinned, so their own dependencies are resolved against the environment.
Installing takes every entry of the lockfile by URL with its hash (``--require-hashes``), so
what is installed is byte for byte what was locked.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle.lockfile import LockedPackage, Lockfile, integrity
from bundle.packages import Dependency, canonicalize_name

PIP_TIMEOUT_SECONDS = 900.0
"""A bound on one pip run (resolving or installing), past any network stall pip retries."""


class PackageInstallError(Exception):
    """pip could not resolve or install (its message, pip's last lines included)."""


@dataclass(frozen=True, slots=True)
class Pip:
    """pip of one interpreter, against one index (``None``: pip's own configuration)."""

    python: str = sys.executable
    index_url: str | None = None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m pip ARGS``; :class:`PackageInstallError` if it fails."""
        command = [self.python, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
        if self.index_url is not None:
            command += ["--index-url", self.index_url]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=PIP_TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            raise PackageInstallError(f"{self.python} cannot be run") from None
        except subprocess.TimeoutExpired:
            raise PackageInstallError(
                f"pip {args[0]} did not finish within {PIP_TIMEOUT_SECONDS:.0f} s"
            ) from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            detail = "\n".join(lines[-15:]) or done.stdout[-2000:]
            raise PackageInstallError(f"pip {args[0]} failed:\n{detail}")
        return done

    def report(self, requirements: Sequence[str], *extra: str) -> list[dict[str, Any]]:
        """What ``pip install requirements`` would install: the ``install`` items of pip's
        installation report."""
        with tempfile.TemporaryDirectory(prefix="goondan-pip-") as scratch:
            report = Path(scratch) / "report.json"
            self.run("install", "--dry-run", "--quiet", "--report", str(report), *extra,
                     *requirements)  # fmt: skip
            items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
            return items


def latest_version(dependency: Dependency, pip: Pip) -> str:
    """The newest version of ``dependency``'s distribution within its range on the index."""
    items = pip.report([dependency.requirement], "--ignore-installed", "--no-deps")
    return str(items[0]["metadata"]["version"])


def resolve(
    dependencies: Sequence[Dependency], pip: Pip, pins: Mapping[str, str] | None = None
) -> Lockfile:
    """The lockfile of ``dependencies`` (those goondan-py provides left out): each at the
    newest version within its range, or at its version in ``pins`` (distribution → version)
    while that is still within it."""
    direct = [d for d in dependencies if not d.builtin]
    if not direct:
        return Lockfile(())
    chosen = _chosen(direct, pip, pins or {})
    pinned = [f"{d.distribution}=={chosen[d.distribution]['metadata']['version']}" for d in direct]
    # what the direct ones need, at the versions pip picks for them
    added = {
        name: item
        for item in pip.report(pinned)
        if (name := canonicalize_name(item["metadata"]["name"])) not in chosen
    }
    return Lockfile(_locked_all(direct, chosen, added))


def _locked_all(
    direct: list[Dependency], chosen: dict[str, dict[str, Any]], added: dict[str, dict[str, Any]]
) -> tuple[LockedPackage, ...]:
    """The direct dependencies (``chosen``) then what they need (``added``), locked."""
    versions = {
        name: str(item["metadata"]["version"]) for name, item in {**chosen, **added}.items()
    }
    packages = [_locked(chosen[d.distribution], d.name, versions, d.range) for d in direct] + [
        _locked(item, name, versions, None) for name, item in sorted(added.items())
    ]
    return tuple(packages)


def _chosen(
    direct: list[Dependency], pip: Pip, pins: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """pip's report of each direct dependency (by canonical name): at its pin while that is
    within its range, else the newest within it."""
    wanted = [
        f"{d.distribution}=={pins[d.distribution]}"
        if d.distribution in pins and d.allows(pins[d.distribution])
        else d.requirement
        for d in direct
    ]
    chosen = {
        canonicalize_name(item["metadata"]["name"]): item
        for item in pip.report(wanted, "--ignore-installed", "--no-deps")
    }
    missing = [d.distribution for d in direct if d.distribution not in chosen]
    if missing:
        raise PackageInstallError(f"pip resolved no version of {', '.join(missing)}")
    return chosen


def _locked(
    item: dict[str, Any], name: str, versions: Mapping[str, str], range_: str | None
) -> LockedPackage:
    distribution = canonicalize_name(item["metadata"]["name"])
    info = item.get("download_info") or {}
    url = info.get("url")
    if not url or "archive_info" not in info:
        raise PackageInstallError(
            f"{distribution} resolved to {url or 'no URL'}, not a file of an index: only "
            "distributions from an index (or a URL of a wheel or sdist) can be locked"
        )
    sha256 = (info["archive_info"].get("hashes") or {}).get("sha256") or _sha256_of(url)
    return LockedPackage(
        name=name,
        distribution=distribution,
        version=str(item["metadata"]["version"]),
        resolved=url,
        integrity=integrity(sha256),
        range=range_,
        dependencies=_dependencies(item, versions),
    )


def _sha256_of(url: str) -> str:
    """The digest of the file at ``url``, for an index that publishes none."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(1 << 16):
                digest.update(chunk)
    except OSError as exc:
        raise PackageInstallError(f"cannot fetch {url} to hash it: {exc}") from None
    return digest.hexdigest()


def _dependencies(item: dict[str, Any], versions: Mapping[str, str]) -> dict[str, str]:
    """The distributions of this lockfile ``item`` requires (markers of this interpreter)."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: dict[str, str] = {}
    for text in item["metadata"].get("requires_dist") or ():
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in versions:
            found[name] = versions[name]
    return found


def install(lockfile: Lockfile, pip: Pip) -> None:
    """Install every entry of ``lockfile``: by its URL, checked against its hash."""
    if not lockfile.packages:
        return
    with tempfile.TemporaryDirectory(prefix="goondan-pip-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(
            "".join(
                f"{p.distribution} @ {p.resolved} --hash=sha256:{p.sha256}\n"
                for p in lockfile.packages
            )
        )
        pip.run("install", "--quiet", "--require-hashes", "-r", str(requirements))
