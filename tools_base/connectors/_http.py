"""What the HTTP connectors share: their listener settings, signature checks, and a server.

Every HTTP connector (``webhook``, ``slack``, ``github``, ``discord``) serves one path over
Starlette on uvicorn, inside its own connector process:

* ``POST <path>`` reaches the connector's handler with the raw body (signatures are over the
  bytes as sent); any other path answers 404, any other method on the path 405, a body over
  the limit 413, and a handler failure 500, logged; the server keeps serving.
* The socket is bound before anything is served, so a port in use (or a bad host) is a
  :class:`~tools_base.ConnectorError` at start, not a crash later; port ``0`` takes a free one,
  logged in the ``connector listening`` line.
* Cancelling :func:`serve` stops the server (the listener closes at once; requests in flight
  get :data:`GRACE_SECONDS`) and returns only once the port is released.
* Slow and many clients cannot starve it (:class:`goondan.http_server.GuardedServer`, as the
  daemon's API): a request head must arrive within 10 s and a body keep 4 KiB/s (else 408),
  one address holds at most a quarter of the connections the process's descriptors allow,
  and stalled connections are shed (503) before a new one waits or is refused (503 with
  ``Retry-After``).

Connectors that must answer fast (Slack, GitHub, Discord give up after a few seconds) hand
events to :meth:`Outbox.accept`, which journals each (``ctx.accept``) before the answer and
leaves its delivery to the runtime: back-pressure then delays events, not the answer, and an
answered event survives a crash. Too many waiting answers 503, which those senders retry.

The listener reports its health (``ctx.report_success`` once it serves, ``report_failure``
for a request whose handler failed), which ``status`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from goondan.http_admission import ConnectionLimits
from goondan.http_server import GuardedServer
from goondan.loopback import is_loopback
from tools_base._connector import ConnectorContext, ConnectorError, ConnectorEvent

DEFAULT_HOST = "127.0.0.1"
"""Where a connector listens unless told otherwise: loopback, behind a tunnel or proxy."""
MAX_BODY_BYTES = 1024 * 1024
"""Default body limit (1 MiB); larger requests are answered 413."""
DRAIN_FACTOR = 8
"""A body over the limit is still read (and dropped) up to this many times the limit before the
413, so the client reads the answer instead of a reset connection; past it the connection is
closed."""
GRACE_SECONDS = 5.0
"""How long requests in flight may take to finish once the server is told to stop."""

Handler = Callable[["Inbound"], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Listen:
    """Where and how a connector serves."""

    host: str
    port: int
    """``0``: any free port (the one bound is logged)."""
    path: str
    """The one path served, normalised: a leading ``/``, no trailing ``/`` (except ``/``)."""
    max_body: int
    """Largest body accepted, in bytes."""

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the listener."""
        return is_loopback(self.host)


@dataclass(frozen=True, slots=True)
class Inbound:
    """One ``POST`` to the connector's path, its body read in full."""

    headers: Mapping[str, str]
    """Request headers (case-insensitive lookup)."""
    body: bytes
    """The raw body, exactly as sent."""
    content_type: str
    """The media type, lower-cased, without parameters (``application/json``)."""


def listen_settings(ctx: ConnectorContext, prefix: str, default_port: int) -> Listen:
    """Read ``<prefix>_HOST``, ``<prefix>_PORT`` (then ``PORT``), ``<prefix>_PATH`` and
    ``<prefix>_MAX_BODY_BYTES`` through ``ctx.setting``; raise ConnectorError if one is bad."""
    host = (ctx.setting(f"{prefix}_HOST") or DEFAULT_HOST).strip()
    if not host:
        raise ConnectorError(f"{prefix}_HOST is blank")
    port = _integer(
        ctx.setting(f"{prefix}_PORT", "PORT", default=str(default_port)),
        f"{prefix}_PORT (or PORT)",
        0,
        65535,
    )
    path = normalise_path(ctx.setting(f"{prefix}_PATH") or "/")
    max_body = _integer(
        ctx.setting(f"{prefix}_MAX_BODY_BYTES", default=str(MAX_BODY_BYTES)),
        f"{prefix}_MAX_BODY_BYTES",
        1,
        64 * MAX_BODY_BYTES,
    )
    return Listen(host=host, port=port, path=path, max_body=max_body)


def normalise_path(value: str) -> str:
    """``slack/events/`` → ``/slack/events``; blank → ``/``."""
    path = value.strip()
    if not path.startswith("/"):
        path = "/" + path
    return path.rstrip("/") or "/"


def _integer(raw: str | None, name: str, low: int, high: int) -> int:
    try:
        value = int((raw or "").strip())
    except ValueError:
        raise ConnectorError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConnectorError(f"{name} must be between {low} and {high}, got {value}")
    return value


def flag(value: str | None) -> bool:
    """A yes/no setting: ``1``, ``true``, ``yes``, ``on`` (any case) are yes."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def require_secret_off_loopback(
    listen: Listen, secret: str | None, *, what: str, allow_setting: str, allowed: bool
) -> None:
    """Refuse to serve beyond this machine with no way to tell forged requests apart."""
    if secret or listen.loopback or allowed:
        return
    raise ConnectorError(
        f"refusing to listen on {listen.host} without {what}: anyone who can reach the port "
        f"could send events; set it, listen on 127.0.0.1 behind a tunnel or proxy, or set "
        f"{allow_setting}=true to accept unsigned requests"
    )


def hmac_sha256_hex(secret: str, *parts: bytes) -> str:
    """The hex HMAC-SHA256 of ``parts`` (concatenated) under ``secret``."""
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.hexdigest()


def same_text(given: str, expected: str) -> bool:
    """Constant-time comparison of two signatures (never ``==``: it leaks the match length)."""
    return hmac.compare_digest(given.encode(), expected.encode())


def json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object, or ``None`` if it is not one."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def text_of(value: object) -> str | None:
    """A non-empty string, or ``None``."""
    return value if isinstance(value, str) and value else None


def mapping_of(value: object) -> dict[str, Any]:
    """A JSON object, or an empty one."""
    return value if isinstance(value, dict) else {}


def answer(status: int, **fields: Any) -> JSONResponse:
    """A JSON answer: ``{"ok": status < 400, ...fields}``."""
    return JSONResponse({"ok": status < 400, **fields}, status_code=status)


class Outbox:
    """Where a request's events go before its sender is answered: the connector's journal."""

    def __init__(self, ctx: ConnectorContext) -> None:
        self._ctx = ctx

    async def accept(self, event: ConnectorEvent) -> bool:
        """Journal ``event`` for delivery (``ctx.accept``): ``True`` once it is on disk, so the
        sender may be answered; ``False`` when it cannot be taken now (answer 503: the sender
        retries). An event the Connector does not declare is logged and dropped."""
        try:
            return await self._ctx.accept(event)
        except ValueError as exc:
            self._ctx.logger.error("connector event refused", event_name=event.name, error=str(exc))
            return True


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or ``None`` when it is over ``limit`` bytes (read up to
    :data:`DRAIN_FACTOR` times the limit, then left unread)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit * DRAIN_FACTOR:
        return None
    body = bytearray()
    drained = 0
    async for chunk in request.stream():
        if drained or len(body) + len(chunk) > limit:
            drained += len(chunk)
            if drained > limit * DRAIN_FACTOR:
                return None
            continue
        body += chunk
    return None if drained else bytes(body)


def build_app(ctx: ConnectorContext, listen: Listen, handle: Handler) -> Starlette:
    """The ASGI app: ``POST listen.path`` → ``handle``; every refusal is JSON."""

    async def endpoint(request: Request) -> Response:
        body = await read_body(request, listen.max_body)
        if body is None:
            return answer(413, error=f"body over {listen.max_body} bytes")
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        try:
            return await handle(Inbound(headers=request.headers, body=body, content_type=media))
        except Exception as exc:
            # The message only: a traceback could quote the body, which may hold anything.
            ctx.logger.error("connector request failed", error=type(exc).__name__)
            ctx.report_failure(f"a request failed: {type(exc).__name__}")
            return answer(500, error="internal error")

    async def not_found(request: Request, exc: Exception) -> Response:
        return answer(404, error="not found")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return JSONResponse(
            {"ok": False, "error": "method not allowed"}, status_code=405, headers={"Allow": "POST"}
        )

    return Starlette(
        routes=[Route(listen.path, endpoint, methods=["POST"])],
        exception_handlers={404: not_found, 405: not_allowed},
    )


def bind(listen: Listen) -> socket.socket:
    """A listening TCP socket on ``listen.host:listen.port``, or ConnectorError."""
    try:
        infos = socket.getaddrinfo(
            listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise ConnectorError(f"cannot resolve host {listen.host!r}: {exc}") from None
    family, _, _, _, address = infos[0]
    try:
        return socket.create_server(address, family=family, backlog=ConnectionLimits().backlog)
    except OSError as exc:
        raise ConnectorError(
            f"cannot listen on {listen.host}:{listen.port}: {exc.strerror or exc}"
        ) from None


async def serve(
    ctx: ConnectorContext,
    listen: Listen,
    handle: Handler,
    *,
    connector: str,
    **log_fields: Any,
) -> None:
    """Serve ``handle`` on ``listen`` until cancelled.

    Logs one ``connector listening`` line with the host, the port bound and the path (plus
    ``log_fields``, which must hold nothing secret).
    """
    sock = bind(listen)
    try:
        config = uvicorn.Config(
            build_app(ctx, listen, handle),
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            server_header=False,
            timeout_graceful_shutdown=int(GRACE_SECONDS),
        )
        # Signals stay the connector process's (it stops the server by cancelling serve());
        # slow and many clients meet the same deadlines and caps as the daemon's API.
        server = GuardedServer(config, error_body=_error_body, log=ctx.logger)
        port = sock.getsockname()[1]
        async with asyncio.TaskGroup() as tasks:
            serving = tasks.create_task(server.serve(sockets=[sock]))
            ctx.logger.info(
                "connector listening",
                connector=connector,
                host=listen.host,
                port=port,
                path=listen.path,
                **log_fields,
            )
            ctx.report_success()
            try:
                # wait() rather than awaiting the task: cancelling us must not cancel uvicorn
                # mid-request, but tell it to shut down in order.
                await asyncio.wait({serving})
            except asyncio.CancelledError:
                await _stop(server, serving)
                raise
            serving.result()
            raise ConnectorError(f"the {connector} listener on {listen.host}:{port} stopped")
    finally:
        sock.close()


def _error_body(code: str, message: str) -> dict[str, Any]:
    """The listener's own 408 and 503 answers, shaped as its other refusals."""
    return {"ok": False, "error": message, "code": code}


async def _stop(server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
    """Shut the server down in order, then force it; every wait is bounded."""
    server.should_exit = True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(GRACE_SECONDS + 1):
            await asyncio.wait({serving})
            return
    server.force_exit = True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1):
            await asyncio.wait({serving})
            return
    serving.cancel()
