"""What an idle AgentProcess wrote to of its fork server's memory, object by object.

Every page of the fork server a child writes to is copied into the child (copy-on-write), and
that copy is most of an idle agent's private memory (``benchmarks/_process_figures.py``). This
finds the writes themselves: it starts ``beta`` of the test swarm through a real Orchestrator
(as ``_process_figures`` does), lets it idle, and for each page it copied compares the child's
page with the fork server's, word by word (``/proc/<pid>/mem``; both are this process's
descendants, so it may read them). Each changed word is then placed in the object that holds
it: a child of the same fork server (:func:`locate`) lists every object it can reach with its
address and size, and answers, for each address, the object's type, the module it belongs to
(functions, code, classes, module and class dictionaries) and which field changed (``refcnt``:
a reference count; ``gc head``: the collector's links; ``body``: anything else, such as a
code object's specialised bytecode or a string's cached hash).

Printed: the copied pages by mapping, the changed words by field and by type, and the modules
whose objects were written on the most pages. Run:
``python benchmarks/written_pages.py [--agent beta|floor] [--mapping NAME] [--top 25] [--json]``
(``floor``: the do-nothing child of ``benchmarks/_floor_child.py`` instead, the floor of every
start; ``--mapping heap``: only the pages of mappings so named; ``--quick``: the floor, for CI).
A word that changed and changed back is not seen (a reference count taken and dropped): the
page's copy is counted in ``pages_unchanged_since``, its cause is not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._locate_objects import locate
from benchmarks._page_origin import PAGE_BYTES, _pages, parent_pid

WORD = 8
SETTLE_SECONDS = 0.5


Mapping = tuple[int, int, str]
"""A mapping of ``/proc/<pid>/maps``: start, end, its file's name and permissions."""


def _mappings(pid: int) -> list[Mapping]:
    out = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            name = fields[5] if len(fields) > 5 else "[anon]"
            out.append((start, end, f"{Path(name).name} {fields[1]}"))
    return out


def copied_pages(child: int, parent: int) -> list[int]:
    """Addresses of the pages ``child`` holds alone where ``parent`` has a page too."""
    parent_pages = _pages(parent)
    return sorted(a for a, alone in _pages(child).items() if alone and a in parent_pages)


def changed_words(child: int, parent: int, pages: list[int]) -> dict[int, list[int]]:
    """For each page, the addresses of the words that differ between child and parent."""
    out: dict[int, list[int]] = {}
    with open(f"/proc/{child}/mem", "rb") as ours, open(f"/proc/{parent}/mem", "rb") as theirs:
        for page in pages:
            try:
                ours.seek(page)
                mine = ours.read(PAGE_BYTES)
                theirs.seek(page)
                other = theirs.read(PAGE_BYTES)
            except OSError:
                continue
            out[page] = [
                page + offset
                for offset in range(0, PAGE_BYTES, WORD)
                if mine[offset : offset + WORD] != other[offset : offset + WORD]
            ]
    return out


def _summarise(
    words: dict[int, list[int]],
    located: dict[int, tuple[str, str | None, str]],
    mappings: list[Mapping],
) -> dict[str, Any]:
    by_mapping: collections.Counter[str] = collections.Counter()
    for page in words:
        name = next((n for s, e, n in mappings if s <= page < e), "?")
        by_mapping[name] += 1
    by_field: collections.Counter[str] = collections.Counter()
    by_type: collections.Counter[str] = collections.Counter()
    module_pages: collections.Counter[str] = collections.Counter()
    type_pages: collections.Counter[str] = collections.Counter()
    unchanged = 0
    for addresses in words.values():
        if not addresses:
            unchanged += 1
        modules_here: set[str] = set()
        types_here: set[str] = set()
        for address in addresses:
            kind, module, field = located[address]
            by_field[field] += 1
            by_type[f"{kind} {field}"] += 1
            types_here.add(f"{kind} {field}")
            if module is not None:
                modules_here.add(_short(module))
        for module in modules_here:
            module_pages[module] += 1
        for kind in types_here:
            type_pages[kind] += 1
    return {
        "copied_pages": len(words),
        "pages_unchanged_since": unchanged,
        "changed_words": sum(len(a) for a in words.values()),
        "pages_by_mapping": dict(by_mapping.most_common()),
        "words_by_field": dict(by_field.most_common()),
        "words_by_type": by_type,
        "pages_by_type": type_pages,
        "pages_by_module": module_pages,
    }


def _short(module: str) -> str:
    marker = "site-packages/"
    if marker in module:
        return module.split(marker, 1)[1]
    if "/lib/python3" in module:
        return "stdlib:" + module.rsplit("/lib/python3", 1)[1].split("/", 1)[1]
    return module


async def _child_pid(which: str, transport: Any, directory: Path) -> tuple[int, Any]:
    if which == "floor":
        from benchmarks._process_figures import FloorChild

        floor = FloorChild(transport)
        await asyncio.sleep(SETTLE_SECONDS)
        return floor.process.pid, floor.close
    from orchestrator.daemon import Orchestrator
    from tests.support.swarm import write_swarm

    orchestrator = Orchestrator.from_bundle(
        write_swarm(directory), state_dir=directory / "state", transport=transport
    )
    await orchestrator.start()
    supervisor = orchestrator.supervisor
    await supervisor.ensure_running("beta")
    await supervisor.stop_agent("beta", 5, "benchmark")  # the first start compiles its tools
    await asyncio.sleep(SETTLE_SECONDS)
    await supervisor.ensure_running(which)
    await asyncio.sleep(SETTLE_SECONDS)
    handle = supervisor.handle(which)
    assert handle is not None, which
    pid = handle.pid
    assert pid is not None, which
    return pid, orchestrator.shutdown


async def measure(which: str, mapping: str = "") -> dict[str, Any]:
    """Copied pages of ``which`` (an agent of the test swarm, or ``floor``), attributed."""
    from orchestrator.transport import MultiprocessingTransport

    transport = MultiprocessingTransport(spares=0)
    with tempfile.TemporaryDirectory() as tmp:
        pid, stop = await _child_pid(which, transport, Path(tmp))
        try:
            server = parent_pid(pid)
            mappings = _mappings(pid)
            pages = [
                page
                for page in copied_pages(pid, server)
                if mapping in next((n for s, e, n in mappings if s <= page < e), "")
            ]
            words = changed_words(pid, server, pages)
            parent_end, child_end = transport.context.Pipe()
            process = transport.context.Process(  # type: ignore[attr-defined]
                target=locate, args=(child_end,), daemon=True
            )
            process.start()
            child_end.close()
            addresses = [a for page in words.values() for a in page]
            parent_end.send(addresses)
            located = dict(zip(addresses, parent_end.recv(), strict=True))
            parent_end.close()
            process.join(10)
        finally:
            result = stop()
            if asyncio.iscoroutine(result):
                await result
    return _summarise(words, located, mappings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="beta", help="an agent of the test swarm, or floor")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--mapping", default="", help="only pages of mappings named so")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="the floor child, for CI")
    options = parser.parse_args()
    if options.quick:
        options.agent = "floor"
    from ipc.logs import configure_logging

    configure_logging("warning")
    import uvloop

    result = uvloop.run(measure(options.agent, options.mapping))
    for key in ("words_by_type", "pages_by_type", "pages_by_module"):
        result[key] = dict(result[key].most_common(options.top))
    if options.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for name, count in value.items():
                print(f"  {count:>7}  {name}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
