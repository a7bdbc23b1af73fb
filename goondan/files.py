"""Writing a file under the state directory whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: a reader, or a process started after a crash, finds the
    old content or the new, never a part of either.

    The bytes go to a temporary file beside ``path`` (mode 0600, a name of its own, so two
    writers never share one), which is fsynced and renamed over ``path``; then the directory is
    fsynced so the rename itself survives a power loss. ``fsync=False`` skips both fsyncs (the
    file is still never torn, only possibly older after a crash of the machine). Raises
    ``OSError``, the temporary file removed.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
