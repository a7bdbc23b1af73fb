"""What keeps web pages from using the HTTP API: Host, Origin and Content-Type checks.

A browser lets any page send a "simple" request to any address, 127.0.0.1 included: a form
post, or ``fetch(..., {mode: "no-cors"})`` with a ``text/plain`` body. The page cannot read
the answer, but the request still acts, and a daemon on loopback without a token would run
the Turn it asks for. Three checks close that, outermost first:

- **Host** (TCP only, :class:`HostAllowList`): a page that rebinds its own DNS name to
  127.0.0.1 is same-origin with the daemon and could read its answers, but its requests
  still name that DNS name in ``Host``. Only the listener's own names are served: the bound
  address, ``localhost``, ``127.0.0.1`` and ``[::1]`` with the listener's port, the address
  the connection actually reached, and ``policy.api.allowedHosts``; anything else is 421.
  ``api.sock`` needs no such check: no browser reaches a Unix socket.
- **Origin** (:class:`OriginCheck`): browsers name the page's origin on every cross-origin
  request and on every ``POST``; a request from an origin not in ``policy.api.corsOrigins``
  (none by default) is refused with 403, a CORS preflight included. With origins listed,
  Starlette's :class:`~starlette.middleware.cors.CORSMiddleware` answers their preflights and
  adds the CORS headers, so a page the operator trusts can use the API.
- **Content-Type** (:class:`JsonOnly`): every ``POST``, ``PUT``, ``PATCH`` and ``DELETE``
  must say ``Content-Type: application/json`` (415 otherwise), except a ``DELETE`` that
  carries no body (the MCP client ends its session so). A page can send that type to
  another origin only after a preflight, which the Origin check refuses: even a browser that
  sent no ``Origin`` could not make a simple request act.

Starlette's ``TrustedHostMiddleware`` is not used for the Host check: it ignores the port,
misreads a bracketed IPv6 address, and answers in plain text, where the API answers JSON.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from goondan.errors import HttpCode
from orchestrator.callers import PEER_KEY, Peer
from orchestrator.http.responses import error

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that must carry a JSON body's Content-Type."""
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""Names a TCP listener always answers to (with its port)."""
CORS_METHODS = ("GET", "POST", "DELETE")
"""Methods an allowed origin's page may use (every method the API has)."""
_HOST = re.compile(
    r"^(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?$"
)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _on_unix_socket(scope: Scope) -> bool:
    peer = scope.get(PEER_KEY)
    return isinstance(peer, Peer) and peer.family == socket.AF_UNIX


def split_host(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or an ``allowedHosts`` entry (lower case, an IPv6
    address without its brackets); ``None`` when it is neither a name nor an address."""
    found = _HOST.match(value.strip().lower())
    if found is None:
        return None
    port = found.group("port")
    if port is not None and not 0 < int(port) < 65536:
        return None
    host = found.group("v6") or found.group("name")
    if found.group("v6") is not None:
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    return host, int(port) if port is not None else None


@dataclass(frozen=True, slots=True)
class HostAllowList:
    """The names a TCP listener on ``port`` answers to (see the module docstring)."""

    port: int
    names: frozenset[str]
    """Hosts served on :attr:`port` only."""
    any_port: frozenset[str]
    """Hosts of ``allowedHosts`` given without a port: served on any port, or none (a proxy
    in front may leave the port out)."""
    with_port: frozenset[tuple[str, int]]
    """``allowedHosts`` entries given with a port."""

    @classmethod
    def of(cls, bound: str, port: int, allowed: Iterable[str] = ()) -> HostAllowList:
        """The list of a listener bound to ``bound``:``port``, plus ``allowed`` entries
        (``name``, ``name:port``, ``[v6]``, ``[v6]:port``; raises ``ValueError`` for others)."""
        names = set(LOOPBACK_NAMES)
        own = split_host(f"[{bound}]" if ":" in bound else bound)
        if own is not None and own[0] not in ("0.0.0.0", "::"):  # a wildcard is no name
            names.add(own[0])
        any_port: set[str] = set()
        with_port: set[tuple[str, int]] = set()
        for entry in allowed:
            parsed = split_host(entry)
            if parsed is None:
                raise ValueError(f"allowedHosts: {entry!r} is not HOST or HOST:PORT")
            host, entry_port = parsed
            if entry_port is None:
                any_port.add(host)
            else:
                with_port.add((host, entry_port))
        return cls(port, frozenset(names), frozenset(any_port), frozenset(with_port))

    def allows(self, header: str | None, peer: Peer | None) -> bool:
        """Whether a request with ``Host: header`` on a connection with ``peer`` is served."""
        parsed = split_host(header) if header is not None else None
        if parsed is None:
            return False
        host, port = parsed
        if host in self.any_port or (host, port or 80) in self.with_port:
            return True
        if (port or 80) != self.port:
            return False
        # The address the client connected to, written as an address: no DNS name is
        # involved, so no page elsewhere can have made the browser send it.
        reached = peer.local[0] if peer is not None and peer.local is not None else None
        return host in self.names or host == reached


@dataclass(frozen=True, slots=True)
class Refusal:
    """The JSON error a check answers a request with instead of serving it."""

    status: int
    code: HttpCode
    message: str


class RequestCheck:
    """ASGI middleware: an HTTP request :meth:`refusal` finds fault with gets that refusal;
    every other request (and every other scope) goes on to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def refusal(self, scope: Scope) -> Refusal | None:
        """Why the HTTP request of ``scope`` is not served; ``None`` when it may be."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(scope) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await error(refusal.status, refusal.code, refusal.message)(scope, receive, send)


class HostCheck(RequestCheck):
    """A TCP request whose ``Host`` is not in the allow-list gets 421."""

    def __init__(self, app: ASGIApp, hosts: HostAllowList) -> None:
        super().__init__(app)
        self.hosts = hosts

    def refusal(self, scope: Scope) -> Refusal | None:
        """421 for a ``Host`` outside the allow-list (never on the Unix socket)."""
        if _on_unix_socket(scope):
            return None
        host = _header(scope, b"host")
        peer = scope.get(PEER_KEY)
        if self.hosts.allows(host, peer if isinstance(peer, Peer) else None):
            return None
        message = (
            f"this daemon does not answer to Host {host!r}: "
            "list the name in policy.api.allowedHosts to serve it"
        )
        return Refusal(421, HttpCode.MISDIRECTED_REQUEST, message)


def normalise_origin(origin: str) -> str:
    """``origin`` as a browser serialises it (lower case, no trailing slash)."""
    return origin.strip().lower().rstrip("/")


class OriginCheck(RequestCheck):
    """A request whose ``Origin`` is not one of ``origins`` gets 403."""

    def __init__(self, app: ASGIApp, origins: Collection[str]) -> None:
        super().__init__(app)
        self.origins = frozenset(normalise_origin(origin) for origin in origins)

    def refusal(self, scope: Scope) -> Refusal | None:
        """403 for an ``Origin`` not listed (a request without one passes)."""
        origin = _header(scope, b"origin")
        if origin is None or normalise_origin(origin) in self.origins:
            return None
        message = (
            f"requests from the web page at {origin} are refused: "
            "list its origin in policy.api.corsOrigins to allow it"
        )
        return Refusal(403, HttpCode.ORIGIN_NOT_ALLOWED, message)


def _bodiless_delete(scope: Scope) -> bool:
    """A ``DELETE`` that says it has no body: nothing in it could be read as a form's."""
    if scope["method"] != "DELETE" or _header(scope, b"transfer-encoding") is not None:
        return False
    return _header(scope, b"content-length") in (None, "0") and not _header(scope, b"content-type")


class JsonOnly(RequestCheck):
    """A state-changing request without ``Content-Type: application/json`` gets 415, whatever
    its body (an empty one included), but for a ``DELETE`` that declares no body at all."""

    def refusal(self, scope: Scope) -> Refusal | None:
        """415 for a state-changing request that does not say it sends JSON."""
        if scope["method"] not in STATE_CHANGING or _bodiless_delete(scope):
            return None
        given = _header(scope, b"content-type")
        media = (given or "").partition(";")[0].strip().lower()
        if media == "application/json":
            return None
        message = f"Content-Type must be application/json on {scope['method']}, " + (
            f"not {given!r}" if given else "and none was given"
        )
        return Refusal(415, HttpCode.UNSUPPORTED_MEDIA_TYPE, message)


def guard(
    app: ASGIApp, *, hosts: HostAllowList | None = None, cors_origins: Collection[str] = ()
) -> ASGIApp:
    """``app`` (whose requests already passed :class:`JsonOnly`, inside the token check)
    behind the Origin check, CORS for ``cors_origins`` when there are some, and the Host
    check when ``hosts`` is given (a TCP listener)."""
    if cors_origins:
        app = CORSMiddleware(
            app,
            allow_origins=[normalise_origin(origin) for origin in cors_origins],
            allow_methods=CORS_METHODS,
            allow_headers=["*"],  # the origin is trusted; its client's headers add nothing
            allow_private_network=True,  # a public page the operator listed may reach loopback
        )
    app = OriginCheck(app, cors_origins)
    if hosts is not None:
        app = HostCheck(app, hosts)
    return app
