"""The state directory on disk: where it is, and the conversation instances in it (read with
:func:`goondan.state_files.metadata.list_instances`, re-exported here).

Imported by the CLI as well as the daemon, so it stays light: no third-party imports."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from goondan.state_files.metadata import list_instances

__all__ = [
    "add_state_options",
    "bundle_directory",
    "default_state_dir",
    "delete_instance_dir",
    "list_instances",
    "resolve_state_dir",
    "spawn_records",
    "state_dir_under_root",
]


def default_state_dir(bundle_path: Path) -> Path:
    """``.goondan/`` beside goondan.yaml (inside a bundle directory)."""
    return bundle_directory(bundle_path) / ".goondan"


STATE_ROOT_ENV = "GOONDAN_STATE_ROOT"
"""The environment variable naming a state root (as ``--state-root`` does)."""


def bundle_directory(bundle_path: Path) -> Path:
    """The directory a configuration belongs to: the bundle directory, or the file's own."""
    resolved = bundle_path.resolve()
    return resolved if resolved.is_dir() else resolved.parent


def state_dir_under_root(root: Path, bundle_path: Path) -> Path:
    """The state directory of ``bundle_path`` under the state root ``root``:
    ``<root>/workspaces/<name>-<digest>``, where ``name`` is a slug of the bundle directory's
    name (to be recognisable) and ``digest`` the first 12 hex digits of the SHA-256 of its
    absolute path (so two bundles never share one, and every command finds the same one
    without reading the configuration)."""
    directory = bundle_directory(bundle_path)
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9._-]", "-", directory.name.lower())).strip("-")
    import hashlib  # here, as shutil below: a command resolving its state needs neither

    digest = hashlib.sha256(os.fsencode(directory)).hexdigest()[:12]
    return root.expanduser().resolve() / "workspaces" / f"{(slug or 'bundle')[:16]}-{digest}"


def resolve_state_dir(
    bundle_path: Path,
    *,
    state_dir: str | None = None,
    state_root: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Where a command finds the state of ``bundle_path``: ``--state-dir`` as given, else under
    ``--state-root``, else under ``$GOONDAN_STATE_ROOT``, else ``.goondan/`` beside it."""
    if state_dir:
        return Path(state_dir)
    root = state_root or (os.environ if environ is None else environ).get(STATE_ROOT_ENV)
    if root:
        return state_dir_under_root(Path(root), bundle_path)
    return default_state_dir(bundle_path)


def add_state_options(sub: argparse.ArgumentParser) -> None:
    """``--state-dir`` and ``--state-root``, as every command that finds the state takes them."""
    sub.add_argument(
        "--state-dir",
        metavar="DIR",
        help="state directory (default: .goondan/ beside the file, or under the state root)",
    )
    sub.add_argument(
        "--state-root",
        metavar="DIR",
        help="keep the state under DIR/workspaces/<bundle>-<digest> instead "
        "(default: $GOONDAN_STATE_ROOT; --state-dir wins)",
    )


def spawn_records(state_dir: Path) -> list[dict[str, Any]]:
    """The ``agents__list`` row of every instance on disk that ``agents__spawn`` created: its
    ``metadata.json`` records who asked (``spawnedBy``), so the list outlives the daemon."""
    rows = []
    for row in list_instances(state_dir):
        by, key = row.get("spawnedBy"), row.get("instanceKey")
        if not isinstance(by, dict) or not isinstance(key, str):
            continue
        owner, owner_key = by.get("agent"), by.get("instanceKey")
        if not isinstance(owner, str) or not isinstance(owner_key, str):
            continue
        directory = Path(row["directory"])
        workdir = row.get("workdir")
        created = by.get("at") if isinstance(by.get("at"), str) else row.get("createdAt")
        rows.append(
            {
                "target": directory.parents[1].name,
                "instanceKey": key,
                "ownerAgent": owner,
                "ownerInstanceKey": owner_key,
                "createdAt": created if isinstance(created, str) else "",
                "cwd": workdir if isinstance(workdir, str) else str(directory / "workspace"),
            }
        )
    return rows


def delete_instance_dir(state_dir: Path, agent: str, key: str) -> bool:
    """Remove the files of one instance; ``False`` when it does not exist."""
    for row in list_instances(state_dir, agent):
        if row.get("instanceKey") == key:
            import shutil

            shutil.rmtree(row["directory"], ignore_errors=True)
            return True
    return False
