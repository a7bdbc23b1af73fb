"""An agent's instance directories on disk: their names, the ``metadata.json`` each keeps,
and the thread that writes those records.

The layout is in :mod:`agent_process.instances`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_process.conversation import ConversationStorageError, ConversationUnreadable
from agent_process.storage import RecordMirror
from goondan.errors import DeliveryCode, DeliveryError
from goondan.state_files import metadata as metadata_file

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class InstanceKeyConflict(DeliveryError):
    """The instance's directory on disk belongs to a different instance key."""

    code = DeliveryCode.E_INSTANCE_KEY_CONFLICT


def instance_dir_name(instance_key: str) -> str:
    """The directory name of ``instance_key``: file-system safe, ≤ 128 chars, and injective.

    A key made only of ``[A-Za-z0-9_.-]`` (not starting or ending with ``.``/``-``, at most 96
    chars) is its own name, so ordinary keys stay readable. Every other key becomes a readable
    slug, a ``+`` and a digest of the exact key: ``+`` never occurs in a key that names itself,
    so no key can take over another key's directory by being spelled like its name.
    """
    slug = _legacy_slug(instance_key)
    if slug == instance_key:
        return instance_key
    slug = slug[:80] or "instance"
    return f"{slug}+{hashlib.sha256(instance_key.encode()).hexdigest()[:24]}"


def _legacy_slug(instance_key: str) -> str:
    return _UNSAFE.sub("-", instance_key).strip("-.")[:96]


def _legacy_dir_name(instance_key: str) -> str:
    """The name older versions gave a key that is not its own name (kept to migrate it)."""
    slug = _legacy_slug(instance_key) or "default"
    return f"{slug}-{hashlib.sha1(instance_key.encode()).hexdigest()[:10]}"


def read_instance_metadata(directory: Path) -> dict[str, object]:
    """An instance's ``metadata.json`` (empty when missing or unreadable); raises
    ``ConversationUnreadable`` for a newer format than this runtime knows, rather than
    misreading it."""
    return metadata_file.read_metadata(directory)


def recorded_key(directory: Path) -> str | None:
    """The instance key ``directory``'s ``metadata.json`` names (``None`` if unreadable)."""
    key = read_instance_metadata(directory).get("instanceKey")
    return key if isinstance(key, str) else None


def recorded_workdir(root: Path, instance_key: str) -> Path | None:
    """The workdir of instance ``instance_key`` under ``root`` (an agent's ``instances/``) as
    its own files record it: the one chosen at spawn, else its ``workspace/``; ``None`` when no
    instance of that key has readable metadata there."""
    directory = root / instance_dir_name(instance_key)
    try:
        recorded = read_instance_metadata(directory)
    except ConversationUnreadable:
        return None
    if recorded.get("instanceKey") != instance_key:
        return None
    custom = recorded.get("workdir")
    return Path(custom) if isinstance(custom, str) else directory / "workspace"


def claim_instance_directory(root: Path, instance_key: str) -> tuple[Path, bool]:
    """The directory of ``instance_key`` under ``root``, checked to be that key's own, and
    whether it exists (``False``: the instance is new, nothing of it is on disk).

    Moves a directory written under the older naming scheme to its new name when its metadata
    names this very key. Raises :class:`InstanceKeyConflict` when the directory records another
    key, so one conversation can never read or overwrite another's files.
    """
    directory = root / instance_dir_name(instance_key)
    if not directory.exists():
        legacy = root / _legacy_dir_name(instance_key)
        if legacy == directory or recorded_key(legacy) != instance_key:
            return directory, False
        legacy.rename(directory)
    owner = recorded_key(directory)
    if owner is not None and owner != instance_key:
        raise InstanceKeyConflict(
            f"the directory {directory} belongs to instance {owner!r}, not {instance_key!r}"
        )
    return directory, True


STATUS_RECORD_SECONDS = 0.2
"""How long a status record may wait to be written, so a burst of Turns costs a few writes."""


class StatusRecorder:
    """Writes instances' ``metadata.json`` on a thread of its own: in order, latest state only,
    at most :data:`STATUS_RECORD_SECONDS` after the change.

    Each Turn records ``processing`` when it starts and ``idle`` when it ends. Replacing a file
    frees the old one's blocks, which costs about as much as a whole short Turn on some disks,
    and nothing waits for the record (it is for operators; the daemon reports live status).
    So the Turn goes on while the thread writes, and records that come within the window
    replace each other: a Turn shorter than the window writes at most once.
    """

    def __init__(
        self,
        log: Any,
        window_seconds: float = STATUS_RECORD_SECONDS,
        mirror: RecordMirror | None = None,
    ) -> None:
        self._log = log
        self._mirror = mirror
        self._window = window_seconds
        self._lock = threading.Lock()
        self._waiting: dict[Path, dict[str, object]] = {}
        self._writing = False
        """A job is on the thread (waiting out the window, or writing); under ``_lock``."""
        self._hurry = threading.Event()
        """Set by :meth:`flush`: write now, without waiting out the window."""
        self._executor: ThreadPoolExecutor | None = None
        self._job: Future[None] | None = None

    def record(self, directory: Path, metadata: dict[str, object]) -> None:
        """Write ``metadata`` as ``directory``'s ``metadata.json`` soon."""
        with self._lock:
            self._waiting[directory] = metadata
            if not self._writing:
                self._writing = True
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(1, thread_name_prefix="instance-status")
                self._job = self._executor.submit(self._write_waiting)

    def flush(self, timeout: float = 5.0) -> None:
        """Write what waits now and return once it is written (bounded): for a synchronous
        caller about to remove a directory, or a process about to exit."""
        job = self._job
        if job is None:
            return
        self._hurry.set()
        try:
            with contextlib.suppress(Exception):
                job.result(timeout)
        finally:
            self._hurry.clear()

    async def aflush(self) -> None:
        """:meth:`flush` without blocking the loop."""
        if self._job is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.flush)

    def _write_waiting(self) -> None:
        while True:
            self._hurry.wait(self._window)
            with self._lock:
                if not self._waiting:
                    self._writing = False
                    return
                batch, self._waiting = self._waiting, {}
            for directory, metadata in batch.items():
                write_metadata(directory, metadata, self._log, self._mirror)


def write_metadata(
    directory: Path, metadata: dict[str, object], log: Any, mirror: RecordMirror | None = None
) -> None:
    """Replace ``directory``'s ``metadata.json`` atomically (and its copy in ``mirror``); a
    refusal is logged only (the status is informational, and a directory deleted meanwhile
    stays deleted)."""
    try:
        data = metadata_file.write_metadata(directory, metadata)
        if mirror is not None:
            mirror.written(directory / metadata_file.FILE_NAME, data)
    except ConversationStorageError as exc:
        log.warning(
            "instance metadata not written",
            instance_key=metadata.get("instanceKey"),
            error=str(exc),
        )
