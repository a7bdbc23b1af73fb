"""Who calls the HTTP API: the peer of each connection, and the identity a request acts as.

On ``api.sock`` the kernel tells who connected (``SO_PEERCRED``: pid, uid, gid, read once when
the connection is made); on TCP the peer's address, and the name of the bearer token the
request carried. Decisions such as approvals record this identity (:meth:`Caller.to_json`).

uvicorn builds a request's scope without the connection's socket, so the daemon's server
reads the peer when a connection is made and wraps the app of that connection
(:func:`connection_app`), which puts the :class:`Peer` in every scope under :data:`PEER_KEY`;
:class:`Identify`, the outermost middleware, turns it into a :class:`Caller`
(:data:`CALLER_KEY`), checking the bearer token of TCP requests on the way. A request with no
peer (an app served some other way) is treated as TCP: it needs the token, and it is nobody
a decision may come from.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import pwd
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from goondan.errors import HttpCode
from orchestrator.approvals import describe_decider

if TYPE_CHECKING:
    from bundle.spec_base import ValueFrom

PEER_KEY = "goondan.peer"
"""The scope key of the connection's :class:`Peer` (``None`` when it could not be read)."""
CALLER_KEY = "goondan.caller"
"""The scope key of the request's :class:`Caller`."""

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token the TCP listener accepts, under a name that decisions record (never the
    token itself). Today there is one, named after where it comes from; the listener takes a
    sequence of them, so named tokens per operator fit without another change."""

    name: str
    secret: str

    def __repr__(self) -> str:
        return f"ApiToken(name={self.name!r})"

    @classmethod
    def named(cls, token: str | ApiToken | None, name: str = "api-token") -> ApiToken | None:
        """``token`` as an :class:`ApiToken` (a bare secret gets ``name``)."""
        if token is None or isinstance(token, ApiToken):
            return token
        return cls(name, token)

    @classmethod
    def from_policy(cls, source: ValueFrom) -> ApiToken:
        """The Swarm policy's ``tokenFrom``, resolved now (a variable that is not set stops
        the daemon's start); named after the variable, or ``Secret/<name>#<key>``."""
        from bundle.secrets import resolve_value
        from bundle.spec_base import ValueSource

        secret = resolve_value(ValueSource(value_from=source), field="token").reveal()
        if source.env is not None:
            return cls(source.env, secret)
        assert source.secret_ref is not None  # ValueFrom holds exactly one of the two
        return cls(f"{source.secret_ref.ref}#{source.secret_ref.key or 'token'}", secret)


@dataclass(frozen=True, slots=True)
class Peer:
    """The other end of one connection, as the kernel reported it when it was made."""

    family: socket.AddressFamily
    pid: int | None = None
    """``SO_PEERCRED`` on a Unix socket: the connecting process, as seen from the daemon's
    PID namespace (0 when it cannot be seen from there)."""
    uid: int | None = None
    gid: int | None = None
    address: tuple[str, int] | None = None
    """A TCP peer's address."""
    local: tuple[str, int] | None = None
    """Our end of a TCP connection."""


def peer_of(transport: Any) -> Peer | None:
    """The :class:`Peer` of an asyncio (or uvloop) transport; ``None`` when it has no socket."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    family = socket.AddressFamily(sock.family)
    if family == socket.AF_UNIX:
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        except (OSError, AttributeError):  # not Linux: who connected stays unknown
            return Peer(family)
        pid, uid, gid = _PEERCRED.unpack(raw)
        return Peer(family, pid=pid, uid=uid, gid=gid)
    try:
        address, local = sock.getpeername(), sock.getsockname()
    except OSError:  # already gone
        return Peer(family)
    return Peer(family, address=(str(address[0]), int(address[1])), local=(local[0], local[1]))


def with_peer(app: ASGIApp, peer: Peer | None) -> ASGIApp:
    """``app`` for one connection: every scope carries ``peer`` under :data:`PEER_KEY`."""

    async def app_with_peer(scope: Scope, receive: Receive, send: Send) -> None:
        scope[PEER_KEY] = peer
        await app(scope, receive, send)

    return app_with_peer


def connection_app(app: ASGIApp, transport: asyncio.BaseTransport) -> ASGIApp:
    """``app`` for a connection just made on ``transport``: its peer read now, while the peer
    is surely connected (the server's per-connection hook)."""
    return with_peer(app, peer_of(transport))


USER_NAME_SECONDS = 60.0
"""How long a uid's login name is reused before the password database is asked again."""
_user_names: dict[int, tuple[str | None, float]] = {}


def user_name(uid: int | None) -> str | None:
    """The login name of ``uid``, when the password database knows it.

    Asked once a minute per uid at most: the database is a file read and parsed on each
    question, which was a tenth of the daemon's own work on a request over its Unix socket;
    a renamed user is seen within :data:`USER_NAME_SECONDS`."""
    if uid is None:
        return None
    now = time.monotonic()
    known = _user_names.get(uid)
    if known is not None and known[1] > now:
        return known[0]
    name: str | None = None
    with contextlib.suppress(KeyError):
        name = pwd.getpwuid(uid).pw_name
    if len(_user_names) > 1024:  # a uid per caller: bounded however many callers come
        _user_names.clear()
    _user_names[uid] = (name, now + USER_NAME_SECONDS)
    return name


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts as, as recorded in a decision (``decidedBy``)."""

    via: Literal["unix", "tcp", "unknown"]
    pid: int | None = None
    uid: int | None = None
    gid: int | None = None
    user: str | None = None
    address: str | None = None
    """``host:port`` of a TCP peer."""
    token: str | None = None
    """The name of the bearer token the request carried."""

    @classmethod
    def of(cls, peer: Peer | None, token: str | None = None) -> Caller:
        """The caller of a request on a connection with ``peer``, carrying token ``token``."""
        if peer is None:
            return cls("unknown", token=token)
        if peer.family == socket.AF_UNIX:
            return cls("unix", peer.pid, peer.uid, peer.gid, user_name(peer.uid))
        address = _host_port(peer.address) if peer.address is not None else None
        return cls("tcp", address=address, token=token)

    def to_json(self) -> dict[str, Any]:
        """``{"via": "unix", "pid", "uid", "gid", "user"?}``, or ``{"via": "tcp", "address",
        "token": NAME}`` (``"anonymous": true`` instead of a token on a listener that needs
        none; ``pid``/``uid``/``user`` too when a loopback peer's process was found)."""
        out: dict[str, Any] = {"via": self.via}
        for key in ("pid", "uid", "gid", "user", "address", "token"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.via != "unix" and self.token is None:
            out["anonymous"] = True
        return out

    def describe(self) -> str:
        """One line for logs and refusals: ``uid 1000 (alice) pid 4242 on api.sock``."""
        return describe_decider(self.to_json())


def _host_port(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def caller_of(request: Request) -> Caller:
    """The :class:`Caller` :class:`Identify` found for ``request``."""
    caller = request.scope.get(CALLER_KEY)
    return caller if isinstance(caller, Caller) else Caller("unknown")


class Identify:
    """ASGI middleware: find each request's :class:`Caller`; on TCP (and wherever the peer is
    unknown), when the listener has tokens, refuse a request without one of them (401).

    ``api.sock`` needs no token: its file mode and the peer's credentials are its check, and
    the CLI, which reaches the daemon only there, holds none.
    """

    def __init__(self, app: ASGIApp, tokens: Sequence[ApiToken] = ()) -> None:
        self.app = app
        self.tokens = [(token.name, f"Bearer {token.secret}".encode()) for token in tokens]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        peer = scope.get(PEER_KEY)
        token = None
        if self.tokens and (peer is None or peer.family != socket.AF_UNIX):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            for name, expected in self.tokens:  # every one compared: no early exit to time
                if hmac.compare_digest(given, expected):
                    token = name
            if token is None:
                body = {
                    "error": {
                        "code": HttpCode.UNAUTHORIZED,
                        "message": "a valid bearer token is required",
                    }
                }
                response = JSONResponse(body, status_code=401)
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        scope[CALLER_KEY] = Caller.of(peer if isinstance(peer, Peer) else None, token)
        await self.app(scope, receive, send)
