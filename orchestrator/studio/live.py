"""The running daemon, as the studio asks it: its status rows, its usage book, and its live
event stream.

All go through the daemon's HTTP API on ``<state>/api.sock``. Status rows (``GET /v1/agents``)
and usage (``GET /v1/usage``) are asked with the CLI's client
(:class:`~orchestrator.http.client.DaemonApi`) off the event loop; the event stream
(``GET /v1/events``) is read here with asyncio, one connection per browser that watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from goondan.errors import DaemonError
from orchestrator.http.client import DaemonApi, socket_path
from orchestrator.operations.answers import SwarmStatus

STATUS_TIMEOUT_SECONDS = 5.0
"""How long the studio waits for the daemon's status rows before showing it as gone."""
CONNECT_TIMEOUT_SECONDS = 5.0
"""How long opening the daemon's event stream may take."""


class StreamClosed(Exception):
    """The daemon's event stream ended (the daemon stopped) or could not be opened."""


def _get(state_dir: Path, path: str) -> tuple[int, Any] | None:
    try:
        return DaemonApi(state_dir, timeout=STATUS_TIMEOUT_SECONDS).call("GET", path)
    except DaemonError:
        return None


def _status(state_dir: Path) -> SwarmStatus | None:
    try:
        api = DaemonApi(state_dir, timeout=STATUS_TIMEOUT_SECONDS)
        status, body = api.answer("GET", "/v1/agents", SwarmStatus)
    except DaemonError:
        return None
    return body if status == 200 and isinstance(body, SwarmStatus) else None


async def daemon_status(state_dir: Path) -> SwarmStatus | None:
    """The daemon's ``/v1/agents`` body, or ``None`` when no daemon serves ``state_dir``."""
    if not socket_path(state_dir).exists():
        return None
    return await asyncio.to_thread(_status, state_dir)


async def daemon_usage(
    state_dir: Path, *, trace: str | None = None, traces: int = 50
) -> tuple[int, Any] | None:
    """The daemon's answer to ``GET /v1/usage`` (``?trace=`` one trace, else the ``traces``
    latest): ``(status, body)``, or ``None`` when no daemon serves ``state_dir``.

    The trace id goes in the query, encoded: whatever it holds stays one value of it.
    """
    if not socket_path(state_dir).exists():
        return None
    query = urlencode({"trace": trace} if trace is not None else {"traces": str(traces)})
    return await asyncio.to_thread(_get, state_dir, f"/v1/usage?{query}")


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise StreamClosed(f"not an HTTP answer: {status_line[:80]!r}")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines if line)
    }
    return int(parts[1]), headers


async def _body(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """The body's bytes as they come (de-chunked when the answer is chunked)."""
    if not chunked:
        while data := await reader.read(65536):
            yield data
        return
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


class DaemonEvents:
    """One subscription to the daemon's ``/v1/events``: open it, then iterate its events.

    Each item is ``("event", event)`` or ``("dropped", count)`` (the daemon dropped events for
    this slow reader). The iteration ends when the daemon closes the stream.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = socket_path(state_dir)
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._chunked = False

    async def open(self) -> None:
        """Connect and wait for the stream's first line; raises :class:`StreamClosed`."""
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                reader, writer = await asyncio.open_unix_connection(str(self.path))
                self._reader, self._writer = reader, writer
                writer.write(
                    b"GET /v1/events HTTP/1.1\r\nHost: goondan\r\n"
                    b"Accept: text/event-stream\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                status, headers = await _read_head(reader)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            await self.close()
            raise StreamClosed(f"the daemon's event stream could not be opened: {exc}") from exc
        if status != 200:
            await self.close()
            raise StreamClosed(f"the daemon answered {status} for its event stream")
        # HTTP response headers, as the wire had them
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"

    async def items(self) -> AsyncIterator[tuple[str, Any]]:
        """``("event", dict)`` and ``("dropped", int)`` until the stream ends."""
        assert self._reader is not None, "open() first"
        buffer = b""
        kind = "message"
        try:
            async for data in _body(self._reader, self._chunked):
                buffer += data
                while b"\n" in buffer:
                    raw, _, buffer = buffer.partition(b"\n")
                    line = raw.decode("utf-8", "replace").rstrip("\r")
                    if line.startswith("event:"):
                        kind = line.removeprefix("event:").strip()
                    elif line.startswith("data:"):
                        payload = line.removeprefix("data:").strip()
                        if kind == "dropped" and payload.isdigit():
                            yield "dropped", int(payload)
                        elif payload.startswith("{"):
                            with contextlib.suppress(ValueError):
                                event = json.loads(payload)
                                if isinstance(event, dict):
                                    yield "event", event
                    elif not line:
                        kind = "message"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return  # the daemon went away mid-stream

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
