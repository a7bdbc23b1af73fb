"""The control socket: how operators talk to a running daemon.

A Unix domain socket ``<state>/control.sock``, created with mode 0600 (only the owner may
connect) and removed on exit. One JSON request per line, one JSON answer per line:

``{"cmd": "status"}``                                   → ``{"ok": true, "agents": [...]}``
``{"cmd": "send", "agent", "text", "instance", "wait"}`` → ``{"ok": true, "answer": {...}}``
``{"cmd": "restart", "agent": NAME | null}``            → ``{"ok": true, "restarted": [...]}``

A socket left by a killed daemon is detected (nothing answers) and replaced; a live one makes
a second daemon refuse to start instead of fighting the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from goondan.errors import DaemonError
from ipc import DEFAULT_INSTANCE_KEY

if TYPE_CHECKING:
    from orchestrator.daemon import Orchestrator

SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 1024 * 1024
LISTEN_BACKLOG = 4096
"""Connections the kernel queues before the daemon accepts them (many CLI calls at once)."""
MAX_CONNECTIONS = 256
"""Open control connections; one more closes the connection idle the longest to make room,
so an operator's ``status`` always gets through."""
IDLE_SECONDS = 30.0
"""A connection that sends no request for this long is closed."""
CONNECT_RETRY_SECONDS = 10.0
"""How long a client retries a connect the kernel refused for a full backlog."""


class DaemonAlreadyRunning(DaemonError, RuntimeError):
    """Another daemon serves this state directory."""


class ApiRefused(DaemonError, RuntimeError):
    """The HTTP API cannot start as asked (a public listener without a token, no ``api``
    extra for ``--listen``)."""


class NoDaemon(DaemonError, RuntimeError):
    """No daemon answers on this state directory."""


class NoAnswer(DaemonError, RuntimeError):
    """The daemon took the request but went away (or fell silent) before answering."""


EXIT_NO_ANSWER = 3
"""CLI exit code: the daemon went away, or did not answer in time, after taking the request."""


def private_unix_socket(path: Path, backlog: int) -> socket.socket:
    """A listening Unix socket at ``path`` that only this user may connect to (mode 0600)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # born 0600: no window where others may connect
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def socket_path(state_dir: Path) -> Path:
    """Where the control socket of ``state_dir`` lives."""
    return state_dir / SOCKET_NAME


def _alive(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class ControlServer:
    """Serves control requests for one Orchestrator."""

    def __init__(self, orchestrator: Orchestrator, path: Path) -> None:
        self.orchestrator = orchestrator
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._owned = False
        self._idle: dict[asyncio.StreamWriter, float] = {}
        """Open connections waiting for a request, with the time they started waiting."""
        self.log = structlog.get_logger("goondan.control")

    async def start(self) -> None:
        """Bind the socket (0600); refuse if a live daemon owns it, replace it if stale."""
        if self.path.exists() or self.path.is_symlink():
            if _alive(self.path):
                raise DaemonAlreadyRunning(
                    f"a daemon is already running for {self.path.parent} (socket {self.path}); "
                    "stop it first, or use another --state-dir"
                )
            self.log.warning("replacing a stale control socket", path=str(self.path))
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._serve,
            sock=private_unix_socket(self.path, LISTEN_BACKLOG),
            limit=MAX_REQUEST_BYTES,
        )
        self._owned = True

    async def close(self) -> None:
        """Stop serving and remove the socket (only ours: never a live daemon's)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        if self._owned:
            self._owned = False
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._make_room()
        try:
            while True:
                self._idle[writer] = time.monotonic()
                try:
                    async with asyncio.timeout(IDLE_SECONDS):
                        line = await reader.readline()
                except TimeoutError:
                    return
                finally:
                    self._idle.pop(writer, None)
                if not line:
                    return
                try:
                    request = json.loads(line)
                    answer = await self.handle(request if isinstance(request, dict) else {})
                except Exception as exc:  # a bad request never hurts the daemon
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(answer, default=str).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._idle.pop(writer, None)
            writer.close()

    def _make_room(self) -> None:
        """At the connection cap, close the connections idle the longest (never one whose
        request is being answered), so idle clients cannot lock operators out."""
        excess = len(self._idle) + 1 - MAX_CONNECTIONS
        if excess <= 0:
            return
        for writer in sorted(self._idle, key=self._idle.__getitem__)[:excess]:
            self._idle.pop(writer, None)
            writer.close()
        self.log.warning("control connections at the cap; closed the longest idle", closed=excess)

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request."""
        orchestrator = self.orchestrator
        command = request.get("cmd")
        if command == "status":
            return {
                "ok": True,
                "swarm": orchestrator.swarm.name,
                "pid": os.getpid(),
                "agents": orchestrator.status(),
            }
        if command in ("send", "restart") and orchestrator.stopping:
            return {"ok": False, "error": "the daemon is shutting down"}
        if command == "send":
            agent = str(request.get("agent") or orchestrator.entry_agent)
            text = str(request.get("text", ""))
            instance = str(request.get("instance") or DEFAULT_INSTANCE_KEY)
            if agent not in orchestrator.supervisor.handles:
                return {"ok": False, "error": f"unknown agent {agent!r}"}
            if not text.strip():  # refused before it is queued, waited for or not
                return {"ok": False, "error": "the text to send is empty"}
            if request.get("wait", True):
                answer = await orchestrator.request(text, agent=agent, instance_key=instance)
                return {"ok": answer.ok, "answer": answer.to_wire()}
            orchestrator.send_unwaited(text, agent, instance)
            return {"ok": True, "accepted": True}
        if command == "restart":
            names = (
                [request["agent"]]
                if request.get("agent")
                else list(orchestrator.supervisor.handles)
            )
            unknown = [n for n in names if n not in orchestrator.supervisor.handles]
            if unknown:
                return {"ok": False, "error": f"unknown agent {unknown[0]!r}"}
            restarted = []
            for name in names:
                handle = await orchestrator.supervisor.restart_agent(name, orchestrator.grace)
                restarted.append({"agent": name, "pid": handle.pid})
            return {"ok": True, "restarted": restarted}
        if command == "delete_instance":
            return await orchestrator.delete_instance(
                str(request.get("agent", "")), str(request.get("instanceKey", ""))
            )
        return {"ok": False, "error": f"unknown command {command!r}"}


def list_instances(state_dir: Path, agent: str | None = None) -> list[dict[str, Any]]:
    """Every conversation instance on disk (from each instance's ``metadata.json``)."""
    rows = []
    for metadata in sorted((state_dir / "agents").glob("*/instances/*/metadata.json")):
        try:
            data = json.loads(metadata.read_text())
        except (OSError, ValueError):
            continue
        if agent is None or data.get("agentName") == agent:
            data["directory"] = str(metadata.parent)
            rows.append(data)
    return rows


def delete_instance_dir(state_dir: Path, agent: str, key: str) -> bool:
    """Remove the files of one instance; ``False`` when it does not exist."""
    import shutil

    for row in list_instances(state_dir, agent):
        if row.get("instanceKey") == key:
            shutil.rmtree(row["directory"], ignore_errors=True)
            return True
    return False


def control_request(
    state_dir: Path, request: dict[str, Any], timeout: float = 120.0
) -> dict[str, Any]:
    """Send one request to the daemon of ``state_dir`` and return its answer."""
    path = socket_path(state_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        _connect(client, path, state_dir)
        data = b""
        try:
            client.sendall(json.dumps(request).encode() + b"\n")
            while not data.endswith(b"\n"):
                chunk = client.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError as exc:
            raise NoAnswer(f"the daemon did not answer within {timeout:g} s") from exc
        except OSError as exc:  # reset or broken pipe: the daemon died under us
            raise NoAnswer(f"the daemon went away before answering ({exc.strerror})") from exc
    if not data.endswith(b"\n"):
        raise NoAnswer("the daemon went away before answering (connection closed)")
    try:
        answer = json.loads(data)
    except ValueError as exc:
        raise NoAnswer("the daemon sent an answer that is not JSON") from exc
    return answer if isinstance(answer, dict) else {"ok": False, "error": "malformed answer"}


def _connect(client: socket.socket, path: Path, state_dir: Path) -> None:
    """Connect, retrying while the kernel refuses for a full backlog (``EAGAIN``)."""
    deadline = time.monotonic() + CONNECT_RETRY_SECONDS
    delay = 0.01
    while True:
        try:
            client.connect(str(path))
            return
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NoDaemon(f"no daemon is running for {state_dir} (no answer on {path})") from exc
        except BlockingIOError as exc:  # the daemon is busy accepting others: retry shortly
            if time.monotonic() >= deadline:
                raise NoAnswer(
                    f"the daemon accepted no connection within {CONNECT_RETRY_SECONDS:g} s"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
