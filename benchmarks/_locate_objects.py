"""The objects of a fork server's child, by address, for ``benchmarks/written_pages.py``.

Runs in a child of the fork server (the target of a ``Process``), so it imports nothing the
preload lacks: what it allocates itself lands in the same free space an agent's allocations
do, and is told apart by being reachable only from objects made after the fork server froze
its preload.
"""

from __future__ import annotations

import bisect
import gc
import os
import sys
import types
from multiprocessing.connection import Connection
from typing import Any

_HEADER_BYTES = 32
"""How far before an object's address its collector head (and 3.11's managed-dict pointers)
may start: a changed word there is put down to the object that follows it."""
POOL_BYTES = 16 * 1024
"""pymalloc's pool size (CPython 3.11, 64-bit): each pool starts with a 48-byte header that
every allocation and free in the pool writes."""
_POOL_HEADER_BYTES = 48


def _owner_module(obj: object) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
        return getattr(obj, "__module__", None)
    if isinstance(obj, types.CodeType):
        return obj.co_filename
    if isinstance(obj, types.MethodType):
        return _owner_module(obj.__func__)
    return None


def _index() -> tuple[list[int], list[tuple[int, str, str | None]]]:
    """Every object reachable from the fork server's frozen preload, sorted by address:
    (start, (end, type, module))."""
    young = {id(obj) for obj in gc.get_objects()}
    gc.unfreeze()
    seen: dict[int, object] = {}
    stack = [obj for obj in gc.get_objects() if id(obj) not in young]
    young.add(id(stack))
    while stack:
        obj = stack.pop()
        if id(obj) in seen or id(obj) in young:
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    owners: dict[int, str] = {}
    for loaded in list(sys.modules.values()):
        if isinstance(loaded, types.ModuleType):
            owners[id(loaded.__dict__)] = f"{loaded.__name__} (globals)"
    for obj in seen.values():
        if isinstance(obj, type):
            for referent in gc.get_referents(obj):
                if isinstance(referent, dict):
                    owners[id(referent)] = f"{obj.__module__} (class {obj.__qualname__})"
    rows: list[tuple[int, int, str, str | None]] = []
    for address, obj in seen.items():
        try:
            size = sys.getsizeof(obj)
        except TypeError:
            continue
        kind = type(obj).__name__
        module = _owner_module(obj)
        if isinstance(obj, dict):
            module = owners.get(address)
            keys = _dict_keys(obj)
            if keys is not None:
                rows.append((keys[0], keys[0] + keys[1], "dict keys", module))
            size = 64
        if gc.is_tracked(obj) or isinstance(obj, type | dict):
            size -= 16  # getsizeof counts the collector head, which lies before the address
        rows.append((address, address + max(size, 16), kind, module))
    rows.sort()
    return [row[0] for row in rows], [row[1:] for row in rows]


def _dict_keys(d: dict[Any, Any]) -> tuple[int, int] | None:
    """The address and size of a dict's keys table (CPython 3.11's layout), if it owns one."""
    import ctypes

    keys = ctypes.c_void_p.from_address(id(d) + 32).value
    if not keys:
        return None
    size = sys.getsizeof(d) - 64
    return (keys, size) if size > 0 else None


def _field(offset: int, kind: str) -> str:
    if offset < 0:
        return "gc head"
    if offset == 0 and kind != "dict keys":
        return "refcnt"
    if kind in _BODY_OFFSETS:
        return f"body+{offset}" if offset < _BODY_OFFSETS[kind] else "body (code)"
    return "body"


_BODY_OFFSETS = {"type": 1000, "ABCMeta": 1000, "code": 184}
"""Types whose body writes are told apart by offset (a type's fields; a code object's header,
before its bytecode begins)."""


def locate(conn: Connection) -> None:
    """The child side: answer each list of addresses with what holds each one, as
    ``(type, module, field)``; ``("pool header", None, "pymalloc")`` for a pool's header,
    ``("?", None, "?")`` for memory no preloaded object holds (free space, buffers)."""
    starts, rows = _index()
    while True:
        try:
            addresses: list[int] = conn.recv()
        except EOFError:
            os._exit(0)
        out = []
        for address in addresses:
            found: tuple[str, str | None, str] = ("?", None, "?")
            at = bisect.bisect_right(starts, address) - 1
            if at >= 0 and address < rows[at][0]:
                kind, module = rows[at][1], rows[at][2]
                found = (kind, module, _field(address - starts[at], kind))
            elif at + 1 < len(starts) and starts[at + 1] - address <= _HEADER_BYTES:
                kind, module = rows[at + 1][1], rows[at + 1][2]
                found = (kind, module, "gc head")
            elif address % POOL_BYTES < _POOL_HEADER_BYTES:
                found = ("pool header", None, "pymalloc")
            out.append(found)
        conn.send(out)
