"""What the fork server does to its memory so that its children copy less of it.

A child of the fork server shares every page of it until it writes to one; then that page is
copied into the child (copy-on-write) and counts, whole, in the child's own memory. These
writes, done once in the fork server before its first fork (``orchestrator._forkserver``),
are writes no child makes any more. Neither changes what any code sees.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import tempfile

_ABSENT_ATTRIBUTE = "__goondan_no_such_attribute__"
_BYTES_OVERHEAD = sys.getsizeof(b"")
"""A ``bytes`` object's size with no content (its header and terminating NUL)."""


def tag_every_class() -> None:
    """Assign every class the collector tracks its method-cache version tag.

    ``type.__getattribute__`` of a name no class has looks it up on the class and on its
    metaclass, which tags both (and their bases), and bypasses any ``__getattr__`` a
    metaclass defines, so no class's own code runs.
    """
    for obj in gc.get_objects():
        if issubclass(type(obj), type):
            with contextlib.suppress(AttributeError):
                type.__getattribute__(obj, _ABSENT_ATTRIBUTE)


def free_blocks() -> dict[int, int]:
    """pymalloc's free blocks in partly used pools, per size class (bytes → blocks), as
    ``sys._debugmallocstats`` reports them (on descriptor 2, which is borrowed meanwhile);
    empty where the interpreter has no pymalloc or the report reads otherwise."""
    with tempfile.TemporaryFile() as report:
        saved = os.dup(2)
        try:
            os.dup2(report.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        text = report.read().decode(errors="replace")
    blocks: dict[int, int] = {}
    for line in text.splitlines():
        # "class size num_pools blocks_in_use avail_blocks"
        fields = line.split()
        if len(fields) == 5 and all(field.isdigit() for field in fields):
            blocks[int(fields[1])] = int(fields[4])
    return blocks


def fill_free_blocks(keep: list[object]) -> int:
    """Take every free block :func:`free_blocks` reports with an object of its size class,
    appended to ``keep`` (the blocks stay taken while it holds them); how many were taken.
    A 16-byte block takes an ``object()``, a 32-byte one a ``float``, every larger one a
    ``bytes`` of the class's size."""
    taken = 0
    for size, count in free_blocks().items():
        for index in range(count):
            if size <= 16:
                keep.append(object())
            elif size <= 32:
                keep.append(index + 0.5)
            else:
                keep.append(bytes(size - _BYTES_OVERHEAD))
            taken += 1
    return taken
