"""The files of the state directory, one module per format, each with its reader and writer.

Agents write these files and the daemon, the CLI and the studio read them, so every side
imports the format from here instead of re-reading the bytes by hand:

* :mod:`~goondan.state_files.conversation` — an instance's ``base.jsonl`` + ``events.jsonl``;
* :mod:`~goondan.state_files.metadata` — an instance's ``metadata.json``;
* :mod:`~goondan.state_files.approvals` — a tool call parked for approval,
  ``approvals/<approvalId>.json``;
* :mod:`~goondan.state_files.eventlog` — the runtime event log, ``runtime-events.jsonl``.

A file that is replaced goes through :func:`goondan.files.write_atomic` (one durability rule);
one made for the first time, whose readers take a partial file for none, may be made in place
under the same rule (:mod:`~goondan.state_files.created`); an append-only file says in its
module why its appends follow a rule of their own.
"""

from __future__ import annotations

from pathlib import Path

from goondan.errors import DeliveryCode, StorageError


class ConversationStorageError(StorageError):
    """Writing a state file failed (disk full, read-only, ...); nothing on disk is torn.

    The message names the file and the OS error; ``code`` is ``E_STORAGE``.
    """

    code = DeliveryCode.E_STORAGE

    def __init__(self, path: Path, error: OSError) -> None:
        super().__init__(f"cannot write {path}: {error.strerror or error}")
        self.path = path
        self.errno = error.errno


class ConversationUnreadable(StorageError):
    """A state file cannot be read or is of an unknown newer format (the message names it)."""

    code = DeliveryCode.E_CONVERSATION_UNREADABLE
