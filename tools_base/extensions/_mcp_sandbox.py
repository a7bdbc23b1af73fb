"""What an MCP stdio server needs of the machine inside the tool sandbox.

A server's program is whatever the operator configured (``npx``, ``uvx``, ``python
server.py``, a binary), so the bridge works out what it must see from the command alone, never
by running it outside the sandbox:

- the executable ``command`` resolves to (through the server's ``PATH``, or against ``cwd``
  when it names a path) and the file it resolves to through symlinks;
- the **installation** the executable belongs to: a directory ``P`` holding it as ``P/bin/…``
  that is a Python virtual environment (``pyvenv.cfg``; its ``home`` interpreter's
  installation too), a Python installation (``P/lib*/python3*/os.py``, the landmark Python
  itself looks for) or a Node.js one (``P/lib/node_modules``), but never ``/`` or a home
  directory;
- the same for the interpreter of a script's ``#!`` line (``#!/usr/bin/env node`` through the
  ``PATH``), and ``uv`` next to ``uvx`` (which starts it);
- every argument that is an absolute path to an existing file (a server script).

The system's directories are visible to every sandboxed program already and are left out.

Each server also gets a directory of its own, read-write and its ``HOME`` inside the sandbox
(caches of ``npx`` and ``uvx`` go there): one server serves every conversation instance of the
agent, so no instance's workspace is its. The directory is made under the system's temporary
directory and named after the agent's process, removed when the agent stops the server, and
swept by the next agent that starts one if its agent died first.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import shutil
import tempfile
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass

from tools_base.sandbox import SYSTEM_PATHS, ConnectionSink, Launch, NetworkProxy, SandboxPolicy
from tools_base.sandbox._cgroup import process_alive
from tools_base.sandbox._quota import Guard

DIRECTORY_PREFIX = "goondan-mcp-"
_HIDDEN_ANYWAY = ("/proc", "/dev", "/sys")
_SHEBANG_BYTES = 512
_MAX_INTERPRETERS = 4
"""How many ``#!`` interpreters deep to follow (a script run by a script run by ...)."""
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class Program:
    """A server's program, resolved on the agent's side."""

    executable: str
    """The absolute path ``command`` resolves to (symlinks kept: it is what runs)."""
    read_only: tuple[str, ...]
    """What must be visible read-only for it to run, outside the system's directories."""


def find_program(
    command: str, args: Sequence[str], *, search_path: str | None, cwd: str
) -> Program:
    """Resolve ``command`` and gather what it needs; :class:`FileNotFoundError` when it names
    no executable file."""
    executable = _resolve(command, search_path=search_path, cwd=cwd)
    if executable is None:
        raise FileNotFoundError(f"command {command!r} is not an executable file on the PATH")
    paths: list[str] = []
    _gather(executable, search_path, paths, depth=0)
    paths += [a for a in args if os.path.isabs(a) and os.path.isfile(a)]
    return Program(executable=executable, read_only=outermost(paths))


def outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` (each also by its real path) that exist outside the system's directories,
    without one that lies in another: each is mounted in the sandbox, and a mount inside an
    earlier read-only one would need a mount point the read-only one cannot take."""
    candidates: set[str] = set()
    for path in paths:
        for form in (os.path.normpath(os.path.abspath(path)), os.path.realpath(path)):
            if os.path.exists(form) and not _within(form, (*SYSTEM_PATHS, *_HIDDEN_ANYWAY)):
                candidates.add(form)
    kept: list[str] = []
    for path in sorted(candidates, key=lambda p: (p.count("/"), p)):
        if not _within(path, kept):
            kept.append(path)
    return tuple(sorted(kept))


def _within(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _resolve(command: str, *, search_path: str | None, cwd: str) -> str | None:
    if "/" in command:
        path = os.path.normpath(os.path.join(cwd, command))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which(command, path=search_path if search_path is not None else os.defpath)
    return os.path.normpath(os.path.abspath(found)) if found else None


def _gather(executable: str, search_path: str | None, into: list[str], *, depth: int) -> None:
    real = os.path.realpath(executable)
    into += [executable, real]
    for binary in dict.fromkeys((executable, real)):
        into += _installations(binary)
        if os.path.basename(binary) == "uvx":
            into.append(os.path.join(os.path.dirname(binary), "uv"))
    interpreter = _interpreter(real, search_path) if depth < _MAX_INTERPRETERS else None
    if interpreter is not None and interpreter not in into:
        _gather(interpreter, search_path, into, depth=depth + 1)


def _installations(binary: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The installation holding ``binary`` as ``P/bin/...`` (and a venv's base interpreter's)."""
    bindir = os.path.dirname(binary)
    if os.path.basename(bindir) != "bin":
        return []
    prefix = os.path.dirname(bindir)
    if prefix in _refused_prefixes() or prefix in seen:
        return []
    found: list[str] = []
    config = os.path.join(prefix, "pyvenv.cfg")
    if os.path.isfile(config):
        found.append(prefix)
        home = _venv_home(config)
        if home is not None:
            found.append(home)
            # A venv made from a venv names the other one's bin: follow it to the interpreter.
            found += _installations(os.path.join(home, "python"), seen | {prefix})
    elif glob.glob(os.path.join(glob.escape(prefix), "lib*", "python3*", "os.py")) or os.path.isdir(
        os.path.join(prefix, "lib", "node_modules")
    ):
        found.append(prefix)
    return found


def _refused_prefixes() -> set[str]:
    """Directories too wide to show whole, though an executable lies in their ``bin``."""
    home = os.path.expanduser("~")
    return {"/", home, os.path.realpath(home)}


def _venv_home(config: str) -> str | None:
    """``home`` of a ``pyvenv.cfg``: the directory of the interpreter the venv was made from."""
    with contextlib.suppress(OSError, UnicodeDecodeError), open(config, encoding="utf-8") as lines:
        for line in lines:
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home" and os.path.isabs(value.strip()):
                return os.path.normpath(value.strip())
    return None


def _interpreter(script: str, search_path: str | None) -> str | None:
    """The program a ``#!`` line names (``env NAME`` looked up on ``search_path``)."""
    try:
        with open(script, "rb") as file:
            head = file.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) != "env":
        return words[0] if os.path.isabs(words[0]) else None
    for word in words[1:]:
        if word.startswith("-") or _ENV_ASSIGNMENT.match(word):
            continue
        return _resolve(word, search_path=search_path, cwd="/") if "/" not in word else word
    return None


def make_directory() -> str:
    """A new private directory for one server (0700), after sweeping those of dead agents."""
    sweep_directories()
    return tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-")


def remove_directory(path: str) -> None:
    """Remove a server's directory and what it left in it."""
    shutil.rmtree(path, ignore_errors=True)


def sweep_directories(parent: str | None = None) -> None:
    """Remove the server directories of agents that are gone (killed before they could)."""
    parent = parent or tempfile.gettempdir()
    uid = os.getuid()
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            owner = entry.name.removeprefix(DIRECTORY_PREFIX).partition("-")[0]
            if not entry.name.startswith(DIRECTORY_PREFIX) or not owner.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (
                    entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == uid
                    and not process_alive(int(owner))
                ):
                    remove_directory(entry.path)


def path_of(env: Mapping[str, str]) -> str:
    """The ``PATH`` a server's command is looked up on."""
    return env.get("PATH") or os.defpath


@contextlib.contextmanager
def recording_on(sinks: list[ConnectionSink], sink: ConnectionSink | None) -> Iterator[None]:
    """While a call runs, the server's proxy (whichever it has, across restarts) records the
    connections it makes on the call's ``sink`` (the newest call's, when several run)."""
    if sink is None:
        yield
        return
    sinks.append(sink)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sinks.remove(sink)


async def start_proxy(
    policy: SandboxPolicy, server: str, sinks: list[ConnectionSink]
) -> NetworkProxy | None:
    """The network proxy of a server with network (it lives as long as the server), recording
    on ``sinks`` (see :func:`recording_on`); ``None`` without network."""
    if not policy.network:
        return None
    proxy = NetworkProxy(policy.network_rules, label=f"mcp:{server}")
    proxy.sinks = sinks
    await proxy.start()
    return proxy


@contextlib.asynccontextmanager
async def watching_quota(
    guard: Guard | None, over: Callable[[], Awaitable[None]]
) -> AsyncIterator[None]:
    """While a server runs, its directory's disk quota is watched: past it, ``over`` runs."""
    watcher = asyncio.create_task(guard.watch(over)) if guard is not None else None
    try:
        yield
    finally:
        if watcher is not None:
            watcher.cancel()


async def launch_off_loop(make: Callable[[], Launch]) -> Launch:
    """``make()`` run off the loop (probing the sandbox runs a program; a call's cgroup is made
    in the file system); a launch finished after its start was cancelled is closed, not
    leaked."""
    done = asyncio.ensure_future(asyncio.to_thread(make))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        done.add_done_callback(_close_launch)
        raise


def _close_launch(done: asyncio.Future[Launch]) -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().close()
