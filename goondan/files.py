"""Writing a file under the state directory whole or not at all: the one atomic write.

Every file the runtime replaces in the state directory (instance metadata, approval records,
pending handles, extension state, a conversation's rewritten base, connector journals, ...)
goes through :func:`write_atomic`, so all of them share one durability rule:

1. the bytes go to a temporary file in the same directory (a rename never crosses a file
   system, and a reader never sees the temporary file under the final name);
2. the temporary file is fsynced, so the new content is on disk before its name is;
3. it is renamed over the final name (atomic on POSIX: the old content or the new);
4. the directory is fsynced, so the rename itself survives a power loss.

Append-only files (a conversation's ``events.jsonl``, the runtime event log, journals) are not
replaced and follow their own format's rule; see their modules.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from goondan.reserve import retrying


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a reader, or a process started after a crash, finds the
    old content or the new, never a part of either.

    The bytes go to a temporary file beside ``path`` (mode 0600, a name of its own, so two
    writers never share one), which is fsynced and renamed over ``path``; then the directory is
    fsynced so the rename itself survives a power loss. Raises ``OSError``, the temporary file
    removed; a failure to sync the directory after the rename raises too (the new content is in
    place, only its survival of a power loss is not known).
    """
    # A full disk releases the state directory's reserve, and the write is tried once more.
    retrying(path.parent, lambda: _write_atomic(path, data))


def _write_atomic(path: Path, data: bytes) -> None:
    import tempfile  # here: a reader of state files (the CLI) never imports it

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """Force ``directory``'s entries (a file created or renamed in it) to stable storage;
    raises ``OSError``."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shift_rotated(path: Path, kept: int) -> None:
    """Rotate ``path`` by name: ``path`` becomes ``path.1``, ``.1`` becomes ``.2``, …, and what
    was ``.{kept}`` is dropped. The caller has closed ``path`` and opens a new one after."""
    for index in range(kept, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        newer = path if index == 1 else path.with_name(f"{path.name}.{index - 1}")
        with contextlib.suppress(FileNotFoundError):
            if index == kept:
                older.unlink(missing_ok=True)
            newer.rename(older)
