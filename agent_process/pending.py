"""Background tool calls that outlive the Step, and restarts.

A call answered ``pending`` keeps working after its Step. The ledger keeps every such handle of
an instance in ``<instance>/pending.json`` until its completion is delivered, so a handle whose
work a restart lost (the work lives in the process that died) is found at the next boot and
answered ``E_TOOL_PENDING_LOST`` instead of staying open in the conversation forever. It also
remembers recent outcomes, so the model can poll a handle (``pending__status``).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import structlog

from agent_process.conversation import ConversationStorageError
from agent_process.storage import RecordMirror
from goondan.errors import ToolCode
from goondan.files import write_atomic
from goondan.time import utc_timestamp
from tools_base import JsonObject, JsonValue

FILE_NAME = "pending.json"
RECENT_OUTCOMES = 256
"""Completed handles per agent whose outcome ``pending__status`` still reports."""
LOST_CODE = ToolCode.E_TOOL_PENDING_LOST

_log = structlog.get_logger("goondan.pending")


@dataclass(frozen=True, slots=True)
class LostHandle:
    """A handle recorded before a restart whose work is gone."""

    instance_key: str
    handle: str
    tool_call_id: str
    tool_name: str

    def completion(self) -> JsonObject:
        """The ``tool_completion`` the conversation gets in place of the lost result."""
        return {
            "type": "tool_completion",
            "handle": self.handle,
            "toolCallId": self.tool_call_id,
            "toolName": self.tool_name,
            "status": "error",
            "error": {
                "code": LOST_CODE,
                "name": "ToolPendingLostError",
                "message": (
                    f"The background work of {self.tool_name!r} (handle {self.handle!r}) was "
                    "lost when the agent restarted; it did not complete."
                ),
                "suggestion": "Start the work again if it is still needed.",
            },
        }


class PendingLedger:
    """Outstanding handles per instance, on disk; recent outcomes in memory."""

    def __init__(self) -> None:
        self.mirror: RecordMirror | None = None
        """Gets a copy of every ledger written (a cluster node's agents; set at boot)."""
        self._open: dict[str, dict[str, tuple[Path, JsonObject]]] = {}
        """instance key → handle → (the instance's ledger file, its record)."""
        self._outcomes: OrderedDict[tuple[str, str], JsonObject] = OrderedDict()

    def started(
        self, instance_key: str, directory: Path, handle: str, tool_call_id: str, tool_name: str
    ) -> None:
        """Record a call answered ``pending`` whose work goes on in this process."""
        path = directory / FILE_NAME
        record: JsonObject = {
            "toolCallId": tool_call_id,
            "toolName": tool_name,
            "startedAt": utc_timestamp(),
        }
        self._open.setdefault(instance_key, {})[handle] = (path, record)
        self._save(instance_key, path)

    def finished(self, instance_key: str, handle: str, outcome: JsonObject) -> None:
        """The work of ``handle`` ended (its completion is being delivered)."""
        entry = self._open.get(instance_key, {}).pop(handle, None)
        self._outcomes[(instance_key, handle)] = outcome
        while len(self._outcomes) > RECENT_OUTCOMES:
            self._outcomes.popitem(last=False)
        if entry is not None:
            self._save(instance_key, entry[0])

    def status(self, instance_key: str, handle: str) -> JsonObject:
        """``{handle, status: running | completed | unknown, result?}`` for the model."""
        if handle in self._open.get(instance_key, {}):
            _, record = self._open[instance_key][handle]
            return {"handle": handle, "status": "running", **record}
        outcome = self._outcomes.get((instance_key, handle))
        if outcome is not None:
            return {"handle": handle, "status": "completed", "result": outcome}
        return {"handle": handle, "status": "unknown"}

    def _save(self, instance_key: str, path: Path) -> None:
        handles: dict[str, JsonValue] = {
            h: r for h, (_, r) in self._open.get(instance_key, {}).items()
        }
        try:
            if not handles:
                path.unlink(missing_ok=True)
                if self.mirror is not None:
                    self.mirror.removed(path)
                return
            data = json.dumps({"v": 1, "instanceKey": instance_key, "handles": handles})
            write_atomic(path, data.encode("utf-8"))
            if self.mirror is not None:
                self.mirror.written(path, data.encode("utf-8"))
        except (OSError, ConversationStorageError) as exc:
            # the work goes on; only a restart could then miss it
            _log.warning("pending handles not recorded", file=str(path), error=str(exc))


def lost_handles(instances_root: Path) -> list[tuple[Path, LostHandle]]:
    """Handles left by an earlier process under ``instances_root``, with their ledger file.

    Called at boot, before any work starts: every recorded handle is lost by then.
    """
    found: list[tuple[Path, LostHandle]] = []
    for path in _instance_files(instances_root, FILE_NAME):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            key = data["instanceKey"]
            handles = data["handles"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            _log.warning("unreadable pending ledger skipped", file=str(path), error=str(exc))
            continue
        if not isinstance(key, str) or not isinstance(handles, dict):
            continue
        for handle, record in handles.items():
            record = record if isinstance(record, dict) else {}
            found.append(
                (
                    path,
                    LostHandle(
                        instance_key=key,
                        handle=str(handle),
                        tool_call_id=str(record.get("toolCallId", "")),
                        tool_name=str(record.get("toolName", "")),
                    ),
                )
            )
    return found


def _instance_files(instances_root: Path, name: str) -> list[Path]:
    """``instances_root/*/name`` that exist, sorted (no glob: its pattern machinery was a good
    part of an agent's boot)."""
    try:
        directories = [entry.path for entry in os.scandir(instances_root) if entry.is_dir()]
    except OSError:  # no instance yet
        return []
    return sorted(path for path in (Path(d, name) for d in directories) if path.is_file())
