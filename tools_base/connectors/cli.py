"""``cli``: every line of standard input becomes an event; end of input ends the connector.

A plain line becomes event ``stdin_message`` with the line as its text and instance key
``cli:<line index>`` (counted from 0 over every line read, empty ones included), so each line
starts a conversation of its own unless an ingress rule sets ``route.instanceKey``. Empty (or
blank) lines are skipped. A line that is a JSON object may say more::

    {"text": "hi", "instanceKey": "u42", "properties": {"user": "ann"}}

``name`` or ``event`` (the event name; default ``stdin_message``), ``text`` or ``message``
(default: the whole line), ``instanceKey`` (default ``cli:<line index>``) and ``properties``
(an object; string values are kept, others dropped). A name the Connector does not declare is
logged and the line skipped. Lines are decoded as UTF-8 (invalid bytes replaced); a trailing
``\\r`` is dropped.

At end of input ``run`` returns, which ends the connector cleanly: the runtime then stops the
swarm once the work in flight is done.

**Where input comes from.** The setting ``path`` (or ``CLI_INPUT_PATH``; Connection config,
secrets or environment) names a file, FIFO or ``/dev/fd/<n>`` to read; without it the
connector reads ``sys.stdin`` as it is when ``run`` is called. A runtime that starts the
connector in a child process (whose ``sys.stdin`` is ``/dev/null`` under ``multiprocessing``)
hands it the daemon's standard input by passing that descriptor to the child and setting
``CLI_INPUT_PATH=/dev/fd/<n>``, or by replacing the child's ``sys.stdin`` with
``open(<n>, "rb", closefd=False)`` before calling ``run``.

Reading never blocks the event loop and is cancellable at once: a helper thread waits in
``select`` on the input and on a control pipe, reads at most one chunk ahead of the connector
(so a slow swarm slows the reading down), and leaves as soon as it is told to. The descriptor
is never switched to non-blocking mode (a terminal shares that mode with the shell).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import sys
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from tools_base import ConnectorContext, ConnectorError, ConnectorEvent, TextMessage

EVENT = "stdin_message"
KEY_PREFIX = "cli"
CHUNK = 64 * 1024
JOIN_SECONDS = 1.0
"""How long stopping waits for the reader thread (it leaves within microseconds of the stop)."""
_CREDIT = b"c"
_STOP = b"s"


def line_event(line: str, index: int) -> ConnectorEvent | None:
    """The event of input line number ``index`` (``None`` for a blank line)."""
    stripped = line.strip()
    if not stripped:
        return None
    default_key = f"{KEY_PREFIX}:{index}"
    parsed: Any = None
    if stripped.startswith("{"):
        with contextlib.suppress(ValueError):
            parsed = json.loads(stripped)
    if not isinstance(parsed, dict):
        return ConnectorEvent(EVENT, TextMessage(line), default_key)
    name = _pick(parsed, "name", "event") or EVENT
    text = _pick(parsed, "text", "message") or line
    key = _pick(parsed, "instanceKey") or default_key
    raw = parsed.get("properties")
    properties: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    kept = {k: v for k, v in properties.items() if isinstance(v, str)}
    return ConnectorEvent(name, TextMessage(text), key, kept)


def _pick(data: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


class InputReader:
    """Chunks of one file descriptor, read by a helper thread that can be stopped at once.

    The thread reads a chunk only after the previous one was taken (a credit on the control
    pipe), and stops when the control pipe says so or the input ends. The descriptor is not
    closed here.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._control_r, self._control_w = os.pipe()
        self._chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._work, name="cli-connector-input", daemon=True)
        self._started = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """Every chunk until end of input."""
        if not self._started:
            self._started = True
            self._thread.start()
        while True:
            item = await self._chunks.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
            self._signal(_CREDIT)

    def close(self) -> None:
        """Stop the thread and wait for it (briefly: it leaves as soon as it reads the stop),
        so the descriptor is not touched after this returns and its owner may close it."""
        if not self._started:
            os.close(self._control_r)
        else:
            self._signal(_STOP)
            self._thread.join(timeout=JOIN_SECONDS)
        os.close(self._control_w)

    def _signal(self, byte: bytes) -> None:
        with contextlib.suppress(OSError):  # the thread already left
            os.write(self._control_w, byte)

    def _work(self) -> None:
        try:
            while True:
                try:
                    readable, _, _ = select.select([self.fd, self._control_r], [], [])
                    if self._control_r in readable:
                        return  # only a stop can arrive while no chunk is outstanding
                    data = os.read(self.fd, CHUNK)
                except OSError as exc:
                    self._post(exc)
                    return
                self._post(data)
                if not data:
                    return
                if os.read(self._control_r, 1) != _CREDIT:
                    return
        finally:
            os.close(self._control_r)

    def _post(self, item: bytes | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
            self._loop.call_soon_threadsafe(self._chunks.put_nowait, item)


async def lines(fd: int) -> AsyncGenerator[str, None]:
    """The lines of ``fd`` (without their line ending), the last one even without a newline."""
    reader = InputReader(fd)
    pending = b""
    try:
        async for chunk in reader.chunks():
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                yield _decode(raw)
        if pending:
            yield _decode(pending)
    finally:
        reader.close()


def _decode(raw: bytes) -> str:
    return raw.removesuffix(b"\r").decode("utf-8", errors="replace")


def _open_input(ctx: ConnectorContext) -> tuple[int, bool]:
    """The descriptor to read, and whether this connector opened it (and so closes it)."""
    path = ctx.setting("path", "CLI_INPUT_PATH")
    if path:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC), True
        except OSError as exc:
            raise ConnectorError(
                f"cli: cannot open input {path!r}: {exc.strerror or exc}"
            ) from None
    stream = sys.stdin
    try:
        if stream is None:
            raise ValueError("no stdin")
        return stream.fileno(), False
    except (AttributeError, OSError, ValueError):
        raise ConnectorError(
            "cli: standard input has no file descriptor; set the Connection config 'path'"
        ) from None


async def run(ctx: ConnectorContext) -> None:
    """Emit an event per input line; return at end of input."""
    fd, owned = _open_input(ctx)
    count = 0
    try:
        async with contextlib.aclosing(lines(fd)) as stream:
            index = -1
            async for line in stream:
                index += 1
                event = line_event(line, index)
                if event is None:
                    continue
                try:
                    await ctx.emit(event)
                except ValueError as exc:
                    ctx.logger.warning("cli line skipped", line_index=index, reason=str(exc))
                    continue
                count += 1
    finally:
        if owned:
            os.close(fd)
    ctx.logger.info("cli input ended", events=count)
