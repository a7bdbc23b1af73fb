"""The fork server's preload (``transport.PRELOAD``): everything it does before its first fork.

Every agent and connector process is forked from the fork server, so what it does here once,
no child has to do again, and the memory it leaves behind is shared by all of them until one
writes to it.

1. **Signals.** A ``systemctl stop`` (``KillMode=control-group``) or ``kill -TERM -<pgid>``
   sends SIGTERM to every process of the daemon's group, the fork server included. A fork
   server that died of it would make every agent look as if it had exited
   (``multiprocessing`` reads the loss of the server as exit code 255) while they still drain
   their Turns. So the fork server ignores SIGTERM; it still exits when the Orchestrator does,
   since it watches the Orchestrator's pipe. SIGINT (Ctrl-C) is ignored too: ``multiprocessing``
   ignores it in the server anyway, but gives each forked child the disposition the server had
   before, which without this line is Python's ``KeyboardInterrupt``, and an agent forked at the
   moment of a Ctrl-C would die of it before its own code runs. Agents set both dispositions
   themselves first thing (``agent_process.main.serve``); this only closes the window before.
2. **The runtime, imported once** (:data:`RUNTIME_MODULES`, and every built-in tool module):
   what each child would otherwise import after its fork (the trampoline it starts in and the
   ``multiprocessing`` module that unpickles its pipe end included), at a cost in time and in
   private memory per child. The built-in tools are imported by their dotted names and
   recorded as the modules of their files (``bundle.entry.remember_entry_module``), so an
   agent loading them as a Tool's entry finds them at once.
3. **Frozen for the collector** (``gc.freeze``): the imported objects move to the collector's
   permanent generation, so no collection in a child walks them, and the pages they live on
   stay shared instead of being copied into every child by the collector's bookkeeping writes.
   The collector is off while importing, so no collection leaves freed holes among them for a
   child's allocations to dirty.
4. **Every class's method-cache tag, assigned** (``_forkserver_memory.tag_every_class``).
   CPython gives a class its version tag (a number and a flag, written into the class object)
   the first time an attribute is looked up on it, and most preloaded classes were first used
   in a child: each such first use wrote into the class's page and copied it. One lookup on
   every class here writes them all once, before the fork. (Measured in alternating runs: an
   idle agent's USS 7.36-7.43 -> 7.18-7.19 MiB, about 60 page faults fewer per start.)
5. **Free blocks and free lists, taken** (``_forkserver_memory.fill_free_blocks``), last,
   after everything above has left its holes. Importing leaves free blocks scattered through
   pymalloc's partly used pools, and freed tuples, lists, dicts and floats on the
   interpreter's free lists, and a child's first objects went there: each one copied a page of
   the fork server's objects (and, for a block, its pool's header page). The fork server takes
   them all with objects it keeps, so a child's objects go into fresh pools, packed together.
   (Measured: every child 0.3-0.4 MiB less; an idle agent 7.19 -> 6.83-6.90 MiB, the
   do-nothing child 2.8 -> 2.4 MiB, about 60 page faults fewer per agent start.)
6. **Process names made possible** (:func:`goondan.proctitle.prepare`): a child replaces its
   environment before its code runs (``_child.run_entry``), after which the memory of its
   command line can no longer be found to write its name (``goondan agent NAME``) into.
7. **No second ``__main__``.** ``multiprocessing`` makes each child re-run the parent's
   ``__main__`` script (``python -m`` modules excepted) so that functions defined there can be
   unpickled. The daemon's children run ``orchestrator._child.run_entry`` with a pipe end and
   a plan, and the parent's script is whatever started the daemon: the ``goondan`` console
   script (which imports the whole CLI and HTTP stack), a test runner, a program embedding the
   Orchestrator. Re-running it costs each child tens of milliseconds and megabytes, and runs a
   script that was never meant to run twice. The preparation the server hands each child keeps
   everything else (``sys.path``, working directory, ...).
"""

from __future__ import annotations

import gc
import importlib
import pkgutil
import signal
from collections.abc import Mapping
from multiprocessing import spawn
from typing import Any

from bundle.entry import remember_entry_module
from bundle.prices import catalogue_installed
from goondan.proctitle import prepare as prepare_process_names
from ipc.payload import find_every_rule
from orchestrator._forkserver_memory import fill_free_blocks, tag_every_class

RUNTIME_MODULES = (
    "multiprocessing.popen_forkserver",
    "orchestrator._child",
    "agent_process.main",
    "connector_process.main",
    "uvloop",
)
"""Imported in the fork server, with every module of :data:`RUNTIME_PACKAGES`."""
CATALOGUE_MODULES = (
    "genai_prices",
    "genai_prices.data",
    "genai_prices.data_snapshot",
)
"""The genai-prices catalogue (its lookup and its data), imported in the fork server when it is
installed (the provider extras bring it): an agent whose Model declares no ``pricing`` loads it
at its first call, which then waited on the import (tens to hundreds of milliseconds) and
copied about 11 MiB into that agent alone. Here it costs the fork server about 6 MiB, once,
shared by every child."""
RUNTIME_PACKAGES = ("tools_base.tools",)
"""Packages whose modules every child may load (the ``@goondan/base`` tools)."""
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")


def _import_runtime() -> None:
    for name in RUNTIME_MODULES:
        importlib.import_module(name)
    if catalogue_installed():
        for name in CATALOGUE_MODULES:
            importlib.import_module(name)
    for package_name in RUNTIME_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.iter_modules(package.__path__):
            remember_entry_module(importlib.import_module(f"{package_name}.{module.name}"))
    find_every_rule()


_TAKEN_BLOCKS: list[object] = []
"""The objects ``fill_free_blocks`` placed: kept for the fork server's life."""
_prepare = spawn.prepare


def _prepare_without_main(data: Mapping[str, Any]) -> None:
    """``multiprocessing.spawn.prepare`` minus re-running the parent's ``__main__``."""
    _prepare({key: value for key, value in data.items() if key not in _MAIN_KEYS})


signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
gc.disable()
_import_runtime()
prepare_process_names()
tag_every_class()
fill_free_blocks(_TAKEN_BLOCKS)
gc.freeze()
gc.enable()
spawn.prepare = _prepare_without_main
