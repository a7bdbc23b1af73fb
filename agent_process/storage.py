"""Where an agent keeps its instances' state: the seam between the runtime and its storage.

Two backends implement :class:`InstanceStorage`:

* :class:`LocalFiles` (one host, the default): every conversation is ``base.jsonl`` +
  ``events.jsonl`` in its instance's directory (:class:`~agent_process.conversation.ConversationStore`)
  and the instance's records (``metadata.json``, ``pending.json``, ``approvals/*.json``) are
  files beside it. Nothing else happens.
* :class:`~agent_process.jetstream_store.JetStreamStorage` (a cluster node): conversations live
  in NATS JetStream and every record file written is mirrored there too, so an agent re-placed
  on another host continues every conversation. The plan's ``cluster_storage`` selects it.

A conversation backend is a :class:`~agent_process.conversation.ConversationStore`: the Turn
loop, the Step and the approval gate call ``load``, ``emit``, ``sync``, ``fold`` and ``close``
on it and read its messages; a backend overrides those five and keeps the in-memory fold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from agent_process.boot import BootError
from agent_process.conversation import ConversationStorageError, ConversationStore
from bundle.plan import AgentPlan


class RecordMirror(Protocol):
    """Keeps a copy of an agent's instance records elsewhere than this host's disk.

    Record files are ``<instance-dir>/metadata.json``, ``<instance-dir>/pending.json`` and
    ``<instance-dir>/approvals/<id>.json`` under the agent's ``instances/`` directory. The
    writers call :meth:`written` after the local file is in place and :meth:`removed` after
    deleting it; each raises :class:`~agent_process.conversation.ConversationStorageError`
    when the copy cannot be made.
    """

    def written(self, path: Path, data: bytes) -> None:
        """The record file ``path`` now holds ``data``."""

    def removed(self, path: Path) -> None:
        """The record file ``path`` was deleted."""

    def instance_removed(self, directory: Path) -> None:
        """The instance of ``directory`` was deleted: its conversation and every record."""


class InstanceStorage(Protocol):
    """Makes the conversation stores of one agent's instances and mirrors their records."""

    @property
    def records(self) -> RecordMirror | None:
        """Where record files are mirrored (``None``: the local files are the only copy)."""

    def conversation(self, directory: Path) -> ConversationStore:
        """The (not yet loaded) conversation store of the instance in ``directory``."""

    def restore(self, instances_root: Path) -> None:
        """Before anything reads the records under ``instances_root``: bring them up to date
        with the mirror (a no-op for local files)."""

    def close(self) -> None:
        """Release connections and threads (the process is stopping)."""


class LocalFiles:
    """Today's single-host storage: conversation files and record files on this disk."""

    records: RecordMirror | None = None

    def __init__(self, *, fsync: bool = True) -> None:
        self._fsync = fsync

    def conversation(self, directory: Path) -> ConversationStore:
        """A :class:`ConversationStore` over ``directory/conversation``."""
        return ConversationStore(directory / "conversation", fsync=self._fsync)

    def restore(self, instances_root: Path) -> None:
        """Nothing to bring back: the files are the truth."""

    def close(self) -> None:
        """Nothing to release."""


def open_storage(plan: AgentPlan) -> InstanceStorage:
    """The storage the plan asks for, its records brought up to date: JetStream when the node
    set ``cluster_storage``, else local files. Raises
    :class:`~agent_process.boot.BootError` when JetStream cannot be used (the agent then
    backs off like any agent that cannot boot)."""
    if plan.cluster_storage is None:
        return LocalFiles()
    from agent_process.jetstream_store import JetStreamStorage

    instances_root = Path(plan.state_dir) / "agents" / plan.agent_name / "instances"
    try:
        storage = JetStreamStorage.open(plan.cluster_storage, plan.agent_name, instances_root)
    except ConversationStorageError as exc:
        raise BootError(f"conversation storage: {exc}") from None
    try:
        storage.restore(instances_root)
    except ConversationStorageError as exc:
        storage.close()
        raise BootError(f"conversation storage: {exc}") from None
    return storage
