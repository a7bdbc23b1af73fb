"""An instance's workdir, opened once when the instance loads and held by descriptor.

The tools of an instance (``file-system``, ``bash``) work in its workdir through the descriptor
opened here (:class:`tools_base._pinned.PinnedDir`), never through its path again: a spawned
instance's workdir lies in its spawner's workspace, whose own programs can replace it with a
symlink at any moment. It is opened from a trusted root, the state directory (for a workdir in
it) or ``/`` (for one outside it, where the Swarm's policy allows that), with no symlink
followed below the root; what is missing below the root is made the same way. Every use then
checks that the path still names the opened directory, so a swap is refused
(``E_SPAWN_CWD_REFUSED``) at the next call, not only at the next load.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent_process.conversation import ConversationStorageError
from goondan.errors import DeliveryCode, DeliveryError
from tools_base._pinned import PinnedDir, WorkdirRefused, path_below


class WorkdirNotPinned(DeliveryError):
    """The workdir has a symlink (or a file) on its way below its trusted root."""

    code = DeliveryCode.E_SPAWN_CWD_REFUSED


def trusted_root(workdir: Path, state_dir: Path) -> str:
    """Where ``workdir`` is checked from: the state directory as configured (or resolved) when
    it lies in it, else ``/``."""
    path = os.path.abspath(workdir)
    for resolve in (os.path.abspath, os.path.realpath):  # resolved only when need be
        root = resolve(state_dir)
        if path_below(path, root) is not None:
            return root
    return os.sep


def checked_path(workdir: Path, state_dir: Path) -> Path | None:
    """``workdir`` as it is now, when it exists with no symlink on its way below its trusted
    root; ``None`` otherwise (a workspace swapped for a link lends nothing)."""
    workdir = Path(os.path.abspath(workdir))
    try:
        pin = PinnedDir.open(workdir, root=trusted_root(workdir, state_dir))
    except (WorkdirRefused, OSError):
        return None
    pin.close()
    return Path(pin.path)


def open_workdir(workdir: Path, state_dir: Path) -> PinnedDir:
    """The pinned ``workdir`` (made if missing). Raises :class:`WorkdirNotPinned` when a
    symlink or a file is on its way, ``ConversationStorageError`` when it cannot be made."""
    workdir = Path(os.path.abspath(workdir))
    try:
        return PinnedDir.open(workdir, root=trusted_root(workdir, state_dir), create=True)
    except WorkdirRefused as exc:
        raise WorkdirNotPinned(f"{exc.message}; the instance does not load") from exc
    except OSError as exc:
        raise ConversationStorageError(workdir, exc) from exc
