"""Chat Completions without the SDK's per-call machinery: the same wire, a fraction of the CPU.

The ``openai`` SDK costs about 1.2 ms of CPU per call in an agent process (its request
options copied and walked, httpx's request and pool, a pydantic model per response and per
streamed chunk), which is most of what a Turn costs. :class:`LeanRoute` makes the same call on
:mod:`agent_process.models._http1`, decodes answers and chunks with msgspec into the structs
below (which have the SDK types' attribute names, so one assembly serves both) and keeps what
the SDK decides: the headers it sends (taken from the configured SDK client itself), its
retries (``maxRetries``; 408, 409, 429 and 5xx, ``x-should-retry``, ``retry-after``, the same
backoff), its timeouts, and its errors' codes and words (see :mod:`agent_process.models._sdk`).

The SDK client stays the route when the lean one cannot speak for it: an origin behind an
environment proxy, a base URL that is not ``http(s)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from agent_process.models._http1 import ConnectionFailed, Origin, Pool, TimedOut, pool_of, proxied
from agent_process.models._sdk import (
    connection_error,
    invalid_response,
    retry_delay,
    should_retry,
    status_error,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI


class Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCallPart(msgspec.Struct):
    """A tool call of an answer, or a piece of one in a streamed delta."""

    index: int = 0
    id: str | None = None
    function: Function | None = None


class Message(msgspec.Struct):
    """An answer's message, or a streamed chunk's delta."""

    content: str | None = None
    tool_calls: list[ToolCallPart] | None = None


class Choice(msgspec.Struct):
    message: Message = msgspec.field(default_factory=Message)
    delta: Message | None = None
    finish_reason: str | None = None


class Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Completion(msgspec.Struct):
    """A whole answer, or one streamed chunk (``error``: what a stream says when it fails)."""

    choices: list[Choice] = []
    usage: Usage | None = None
    model: str = ""
    error: object = None


_DECODE = msgspec.json.Decoder(Completion)
_ENCODE = msgspec.json.Encoder()
_PATH = "chat/completions"

ChunkSink = Callable[[Completion, Callable[[str], None]], None]


class LeanRoute:
    """Chat Completions calls of one configured SDK client, on the process's shared pool."""

    def __init__(
        self,
        origin: Origin,
        head: bytes,
        timeouts: tuple[float | None, float | None],
        max_retries: int,
        name: str,
        key_source: str,
    ) -> None:
        self.origin = origin
        self._head = head
        self._connect_timeout, self._read_timeout = timeouts
        self._read_header = (
            b""
            if self._read_timeout is None
            else (b"x-stainless-read-timeout: %s\r\n" % str(self._read_timeout).encode())
        )
        self.max_retries = max_retries
        self._name = name
        self._key_source = key_source

    @classmethod
    def of(cls, client: AsyncOpenAI, name: str, key_source: str) -> LeanRoute | None:
        """The route of ``client``'s calls (its base URL, headers, timeouts and retries), or
        ``None`` when only the SDK can make them."""
        try:
            origin = Origin.of(str(client.base_url))
        except ValueError:
            return None
        if proxied(origin):
            return None
        headers = {**client.default_headers, **client.auth_headers}
        headers["X-Stainless-Async"] = "async:asyncio"
        lines = [f"{key}: {value}\r\n" for key, value in headers.items() if isinstance(value, str)]
        try:
            head = "".join(lines).encode("ascii")
        except UnicodeEncodeError:
            return None
        timeout = client.timeout
        timeouts = (
            (timeout.connect, timeout.read)
            if not isinstance(timeout, float | int | None)
            else (timeout, timeout)
        )
        return cls(origin, head, timeouts, client.max_retries, name, key_source)

    async def complete(self, body: dict[str, object]) -> Completion:
        """One call answered whole."""
        raw = await self._call(_ENCODE.encode(body), None)
        try:
            return _DECODE.decode(raw)
        except msgspec.DecodeError as exc:
            raise invalid_response(self._name, str(exc)) from None

    async def stream(
        self, body: dict[str, object], sink: ChunkSink, on_text: Callable[[str], None]
    ) -> None:
        """One streamed call: each chunk handed to ``sink`` with ``on_text`` as it arrives."""
        data = _ENCODE.encode({**body, "stream": True, "stream_options": {"include_usage": True}})

        async def consume(pieces: AsyncIterator[bytes]) -> None:
            finished = False
            async for event in _sse_data(pieces):
                if finished:
                    continue  # what follows [DONE] is read so the connection serves again
                if event.startswith(b"[DONE]"):
                    finished = True
                    continue
                try:
                    chunk = _DECODE.decode(event)
                except msgspec.DecodeError as exc:
                    raise invalid_response(self._name, str(exc)) from None
                if chunk.error:
                    raise invalid_response(self._name, _stream_error(chunk.error))
                sink(chunk, on_text)

        await self._call(data, consume)

    def _pool(self) -> Pool:
        return pool_of(self.origin)

    async def _call(
        self,
        data: bytes,
        consume: Callable[[AsyncIterator[bytes]], Awaitable[None]] | None,
    ) -> bytes:
        """Send ``data`` until an answer comes or the SDK's retries are spent; the answer's
        body, or (a stream) ``b""`` once ``consume`` has read it. A stream is never retried once its
        first byte was read: text already handed on must not come twice."""
        timeout = self._read_timeout
        for retries_taken in range(self.max_retries + 1):
            retry = retries_taken < self.max_retries
            head = b"%sx-stainless-retry-count: %d\r\n%s" % (
                self._head,
                retries_taken,
                self._read_header,
            )
            streaming = False
            try:
                async with self._pool().post(_PATH, head, data, timeout, self._connect_timeout) as (
                    answer,
                    pieces,
                ):
                    if answer.status < 400:
                        if consume is None:
                            return b"".join([piece async for piece in pieces])
                        streaming = True
                        await consume(pieces)
                        return b""
                    failed = b"".join([piece async for piece in pieces])
            except ConnectionFailed as exc:
                if retry and not streaming:
                    await asyncio.sleep(retry_delay(retries_taken, None))
                    continue
                raise connection_error(self._name, isinstance(exc, TimedOut)) from None
            if retry and should_retry(answer.status, answer.headers):
                await asyncio.sleep(retry_delay(retries_taken, answer.headers))
                continue
            raise status_error(self._name, self._key_source, answer.status, failed, answer.headers)
        raise AssertionError("unreachable: the last try returns or raises")


def _stream_error(error: object) -> str:
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else "An error occurred during streaming"


async def _sse_data(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data`` of each server-sent event of a body (its lines joined by ``\\n``)."""
    rest = b""
    data: list[bytes] = []
    async for piece in pieces:
        lines = (rest + piece).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    if rest.startswith(b"data:"):
        value = rest[5:]
        data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data)
