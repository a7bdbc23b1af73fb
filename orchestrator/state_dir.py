"""The state directory on disk: where it is, and the conversation instances in it.

Imported by the CLI as well as the daemon, so it stays light: no third-party imports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from goondan.defaults import INSTANCE_METADATA_FORMAT
from goondan.errors import newer_format


def default_state_dir(bundle_path: Path) -> Path:
    """``.goondan/`` beside goondan.yaml (inside a bundle directory)."""
    resolved = bundle_path.resolve()
    return (resolved if resolved.is_dir() else resolved.parent) / ".goondan"


def list_instances(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    """Every conversation instance on disk (from each instance's ``metadata.json``)."""
    rows = []
    for metadata in sorted((state_dir / "agents").glob("*/instances/*/metadata.json")):
        try:
            data = json.loads(metadata.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        refusal = newer_format(
            metadata, "metadata", data.get("formatVersion"), INSTANCE_METADATA_FORMAT
        )
        if refusal is not None:  # not misread: named, with what to do
            data = {
                "agentName": metadata.parents[2].name,
                "instanceKey": None,
                "error": refusal,
            }
        if agent is None or data.get("agentName") == agent:
            data["directory"] = str(metadata.parent)
            rows.append(data)
    return rows


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
            shutil.rmtree(row["directory"], ignore_errors=True)
            return True
    return False
