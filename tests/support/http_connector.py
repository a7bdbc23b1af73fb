"""Run an HTTP connector's ``run(ctx)`` on a free port and talk to it over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx2

from tests.support.connector_harness import RecordingContext
from tools_base import ConnectorContext

Run = Callable[[ConnectorContext], Awaitable[None]]


class RecordingLogger:
    """A logger that keeps every line, and tells when the connector is listening."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []
        self.listening = asyncio.Event()
        self.port: int | None = None

    def _log(self, level: str, event: str, fields: dict[str, Any]) -> None:
        self.records.append((level, event, fields))
        if event == "connector listening":
            self.port = fields["port"]
            self.listening.set()

    def debug(self, event: str, /, **fields: Any) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, /, **fields: Any) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, /, **fields: Any) -> None:
        self._log("warning", event, fields)

    def error(self, event: str, /, **fields: Any) -> None:
        self._log("error", event, fields)

    def text(self) -> str:
        """Every line, as one string (to check nothing secret was logged)."""
        return "\n".join(f"{level} {event} {fields!r}" for level, event, fields in self.records)


class HttpConnectorContext(RecordingContext):
    """A :class:`RecordingContext` whose logger is a :class:`RecordingLogger`; it listens on
    127.0.0.1 and a free port unless ``config`` says otherwise."""

    def __init__(self, prefix: str, *, config: Mapping[str, str] | None = None, **kwargs: Any):
        settings = {f"{prefix}_HOST": "127.0.0.1", f"{prefix}_PORT": "0", **(config or {})}
        super().__init__(config=settings, **kwargs)
        self.log = RecordingLogger()

    @property
    def logger(self) -> RecordingLogger:
        return self.log


@contextlib.asynccontextmanager
async def serving(
    run: Run, ctx: HttpConnectorContext, seconds: float = 10.0
) -> AsyncIterator[httpx2.AsyncClient]:
    """Start ``run(ctx)`` as a task, wait (bounded) until it listens, yield a client of it;
    on the way out cancel it and check it ended cancelled, its port released."""
    task = asyncio.create_task(run(ctx))
    listening = asyncio.create_task(ctx.log.listening.wait())
    try:
        async with asyncio.timeout(seconds):
            await asyncio.wait({task, listening}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        listening.cancel()
        if not task.done() and not ctx.log.listening.is_set():
            task.cancel()
    if task.done():
        task.result()  # raises what run raised
        raise AssertionError("run returned before listening")
    assert ctx.log.port is not None
    port = ctx.log.port
    try:
        async with httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=seconds
        ) as client:
            yield client
    finally:
        task.cancel()
        async with asyncio.timeout(seconds):
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert port_is_free(port), f"port {port} still bound after run was cancelled"


async def run_until_error(run: Run, ctx: ConnectorContext, seconds: float = 10.0) -> BaseException:
    """What ``run(ctx)`` raises at start (it must raise, and within ``seconds``)."""
    try:
        async with asyncio.timeout(seconds):
            await run(ctx)
    except TimeoutError:
        raise AssertionError("run did not fail") from None
    except Exception as exc:
        return exc
    raise AssertionError("run returned instead of failing")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a new listener can bind ``host:port``."""
    try:
        with socket.create_server((host, port)):
            return True
    except OSError:
        return False


def hmac_hex(secret: str, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``body`` under ``secret`` (what ``openssl dgst -sha256 -hmac``
    prints)."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_connection(secret_env: str) -> str:
    """A ``webhook`` Connection ``hooks`` on a free port, signed with the secret in the
    environment variable ``secret_env``, routing to ``Agent/beta`` instance ``hooks``."""
    return f"""\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: hooks}}
spec:
  connectorRef: {{kind: Connector, name: webhook, package: "@goondan/base"}}
  config:
    WEBHOOK_PORT: {{value: "0"}}
  secrets:
    signingSecret: {{valueFrom: {{env: {secret_env}}}}}
  ingress:
    rules:
      - route: {{agentRef: Agent/beta, instanceKey: hooks}}
"""


def signed_webhook(
    secret: str, text: str, delivery: str | None = None
) -> tuple[bytes, dict[str, str]]:
    """A ``webhook`` delivery of ``text`` signed now with ``secret`` (its body and headers),
    with ``X-Goondan-Delivery`` when ``delivery`` is given."""
    body = json.dumps({"text": text}).encode()
    timestamp = str(int(time.time()))
    signature = hmac_hex(secret, timestamp.encode() + b"." + body)
    headers = {"X-Goondan-Timestamp": timestamp, "X-Goondan-Signature": f"sha256={signature}"}
    if delivery is not None:
        headers["X-Goondan-Delivery"] = delivery
    return body, headers
