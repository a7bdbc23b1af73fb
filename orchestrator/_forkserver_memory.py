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


def malloc_report() -> str:
    """What ``sys._debugmallocstats`` writes (on descriptor 2, borrowed meanwhile): pymalloc's
    pools per size class and the interpreter's free lists; empty when no file can take it
    (then nothing is filled, and the fork server starts as it did before)."""
    try:
        report = os.memfd_create("malloc-report") if hasattr(os, "memfd_create") else None
        if report is None:
            with tempfile.TemporaryFile() as temporary:
                return _report_into(os.dup(temporary.fileno()))
        return _report_into(report)
    except OSError:
        return ""


def _report_into(fd: int) -> str:
    """The report written into ``fd`` (closed after), read back."""
    with os.fdopen(fd, "w+b") as report:
        saved = os.dup(2)
        try:
            os.dup2(report.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        return report.read().decode(errors="replace")


def free_blocks(report: str | None = None) -> dict[int, int]:
    """pymalloc's free blocks in partly used pools, per size class (bytes → blocks), from
    ``report`` (:func:`malloc_report` by default); empty where the interpreter has no pymalloc
    or the report reads otherwise."""
    blocks: dict[int, int] = {}
    for line in (malloc_report() if report is None else report).splitlines():
        # "class size num_pools blocks_in_use avail_blocks"
        fields = line.split()
        if len(fields) == 5 and all(field.isdigit() for field in fields):
            blocks[int(fields[1])] = int(fields[4])
    return blocks


def free_list_objects(report: str | None = None) -> dict[str, int]:
    """How many freed objects the interpreter keeps for reuse, per kind (``tuple3`` for
    3-tuples, ``list``, ``dict``, ``float``), from ``report``."""
    kinds: dict[str, int] = {}
    for line in (malloc_report() if report is None else report).splitlines():
        # "340 free 2-sized PyTupleObjects * 40 bytes each = 13,600", "71 free PyListObjects ..."
        fields = line.split()
        if len(fields) < 4 or fields[1] != "free" or not fields[0].isdigit():
            continue
        if fields[2].endswith("-sized") and fields[3] == "PyTupleObjects":
            kinds[f"tuple{fields[2].removesuffix('-sized')}"] = int(fields[0])
        elif fields[2] in ("PyListObjects", "PyDictObjects", "PyFloatObjects"):
            kinds[fields[2].removeprefix("Py").removesuffix("Objects").lower()] = int(fields[0])
    return kinds


def _free_list_object(kind: str, index: int) -> object:
    if kind.startswith("tuple"):
        return tuple([None] * int(kind.removeprefix("tuple")))
    if kind == "list":
        return []
    if kind == "dict":
        return {}
    return index + 0.5


def fill_free_blocks(keep: list[object]) -> int:
    """Take every object the interpreter's free lists hold and every free block
    :func:`free_blocks` reports, with objects appended to ``keep`` (taken while it holds
    them); how many were taken. A free list gives up its objects to new ones of its kind; a
    16-byte block takes an ``object()``, a 32-byte one a ``float``, every larger one a
    ``bytes`` of the class's size."""
    report = malloc_report()
    taken = 0
    for kind, count in free_list_objects(report).items():
        for index in range(count):
            keep.append(_free_list_object(kind, index))
            taken += 1
    for size, count in free_blocks(report).items():
        for index in range(count):
            if size <= 16:
                keep.append(object())
            elif size <= 32:
                keep.append(index + 0.5)
            else:
                keep.append(bytes(size - _BYTES_OVERHEAD))
            taken += 1
    return taken
