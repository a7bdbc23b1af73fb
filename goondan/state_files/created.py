"""A state file made for the first time, in place: no temporary file, no rename.

A file that replaces another goes through :func:`goondan.files.write_atomic`, so a reader sees
the old content or the new. A file that has no old content has nothing to keep whole: the
rename only costs (on ext4 about as much as the file's two fsyncs together, for a new
instance's ``metadata.json`` and a new conversation's first base). :func:`create_in_place`
makes such a file with ``O_EXCL``, under the same durability rule (the file, then its
directory, forced to disk). The price is that a reader may meet the file before its write
ends, or cut short by a kill; so it is only for formats whose readers take a partial file for
none (``metadata.json``: unparsable, no record) or ignore its incomplete part (a base's fold
segment that holds fewer messages than it announces).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from goondan.files import sync_directory


def create_in_place(path: Path, data: bytes, *, fsync: bool = True) -> bool:
    """Create ``path`` holding ``data``; ``False`` (nothing written) when it exists already.
    With ``fsync`` the file, then its directory, are forced to disk. Raises ``OSError``, the
    file removed (a failure to sync the directory after a whole write raises too, the file
    kept, as :func:`goondan.files.write_atomic` does after its rename)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    if fsync:
        sync_directory(path.parent)
    return True
