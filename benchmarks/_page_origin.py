"""Where a forked child's private pages come from, from ``/proc/<pid>/pagemap``.

A page the child maps exclusively (pagemap bit 56) at an address where its parent, the fork
server, has a page too was shared at the fork and copied on the child's first write to it:
a copy-on-write copy. An exclusive page at an address the parent has nothing at is memory the
child allocated itself. Only the present and exclusive bits are read, which the process's
owner may read without privileges (the frame numbers, which need them, are not used).
"""

from __future__ import annotations

import os
import struct

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_PRESENT = 1 << 63
_EXCLUSIVE = 1 << 56
_ENTRY = struct.Struct("Q")


def _pages(pid: int) -> dict[int, bool]:
    """Every present page of ``pid``: its address, and whether ``pid`` maps it alone."""
    pages: dict[int, bool] = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split()
            if len(fields) > 5 and fields[5] == "[vsyscall]":
                continue  # outside the range pagemap answers for
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            pagemap.seek(start // PAGE_BYTES * _ENTRY.size)
            entries = pagemap.read((end - start) // PAGE_BYTES * _ENTRY.size)
            for index, (entry,) in enumerate(_ENTRY.iter_unpack(entries)):
                if entry & _PRESENT:
                    pages[start + index * PAGE_BYTES] = bool(entry & _EXCLUSIVE)
    return pages


def parent_pid(pid: int) -> int:
    """The parent of ``pid``, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[1])


def private_origin_mib(child: int, parent: int) -> dict[str, float]:
    """The child's exclusive pages in MiB: ``copied`` from ``parent`` on write, or ``new``."""
    parent_pages = _pages(parent)
    copied = new = 0
    for address, exclusive in _pages(child).items():
        if exclusive:
            if address in parent_pages:
                copied += 1
            else:
                new += 1
    return {"copied": copied * PAGE_BYTES / 2**20, "new": new * PAGE_BYTES / 2**20}
