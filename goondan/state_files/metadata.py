"""An instance's ``metadata.json``: who it is, its status and what its model calls used.

Under the state directory, ``agents/<agent>/instances/<instance-dir>/metadata.json``::

    {formatVersion, agentName, instanceKey, status, createdAt, updatedAt,
     workdir? (chosen at spawn), spawnedBy? {agent, instanceKey, at},
     usage? {inputTokens, outputTokens, totalTokens, cost, calls}}

The agent writes it (replaced whole with :func:`goondan.files.write_atomic`); the daemon, the
CLI and the studio read it through :func:`read_metadata` and :func:`list_instances`. A record
of a newer ``formatVersion`` than this runtime's is refused, never misread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goondan.defaults import INSTANCE_METADATA_FORMAT
from goondan.errors import newer_format
from goondan.files import write_atomic
from goondan.reserve import retrying
from goondan.state_files import ConversationStorageError, ConversationUnreadable
from goondan.state_files.created import create_in_place

FILE_NAME = "metadata.json"


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """The bytes of ``metadata`` as the file holds them: indented UTF-8 JSON, for the person
    who opens it (msgspec indents in C; ``json``'s indenting encoder is pure Python and was a
    new conversation's dearest line). Imported here: the CLI reads these files and must
    start without msgspec."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(metadata), indent=2)


def write_metadata(directory: Path, metadata: dict[str, Any]) -> bytes:
    """Replace ``directory``'s ``metadata.json`` with ``metadata`` atomically and return the
    bytes written; raises :class:`ConversationStorageError` naming the file."""
    data = encode_metadata(metadata)
    path = directory / FILE_NAME
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc
    return data


def create_metadata(
    directory: Path, metadata: dict[str, Any], *, durable: bool = True
) -> bytes | None:
    """Write a new instance's ``metadata.json`` in place and return the bytes written;
    ``None`` (nothing written) when the file exists already, which :func:`write_metadata`
    then replaces. Raises :class:`ConversationStorageError` naming the file, none left.
    ``durable=False`` leaves the file to the kernel's writeback: for a caller whose next
    :func:`write_metadata` follows soon and forces the file and the directory to disk.

    No temporary file is renamed over it: there is nothing to keep whole, and that rename
    cost a new instance more than its fsyncs. A reader that meets the file before its write
    ends, or after a kill cut it short, reads no record (see :func:`read_metadata`), as it
    would read none a moment earlier; the next record replaces it whole. The file and its
    directory are forced to disk as :func:`goondan.files.write_atomic` forces them.
    """
    data = encode_metadata(metadata)
    path = directory / FILE_NAME
    try:
        created = retrying(directory, lambda: create_in_place(path, data, fsync=durable))
    except OSError as exc:
        raise ConversationStorageError(path, exc) from exc
    return data if created else None


def read_metadata(directory: Path) -> dict[str, Any]:
    """``directory``'s ``metadata.json`` (empty when missing or unreadable); raises
    :class:`ConversationUnreadable` for a newer format than this runtime knows."""
    data = _read(directory / FILE_NAME)
    return {} if data is None else data


def _read(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; ``None`` when missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    refusal = newer_format(path, "metadata", data.get("formatVersion"), INSTANCE_METADATA_FORMAT)
    if refusal is not None:
        raise ConversationUnreadable(refusal)
    return data


def list_instances(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    """The ``metadata.json`` of every instance under ``state_dir`` (of ``agent``'s only, when
    given), each with its ``directory``, in the order of their paths. A record this runtime
    cannot read for its newer format is named instead, as ``{agentName, instanceKey: None,
    error}``; an unreadable one is left out."""
    rows = []
    for path in sorted((state_dir / "agents").glob(f"*/instances/*/{FILE_NAME}")):
        try:
            data = _read(path)
        except ConversationUnreadable as exc:  # not misread: named, with what to do
            data = {"agentName": path.parents[2].name, "instanceKey": None, "error": str(exc)}
        if data is None:
            continue
        if agent is None or data.get("agentName") == agent:
            data["directory"] = str(path.parent)
            rows.append(data)
    return rows
