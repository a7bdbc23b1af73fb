"""Which host a request is for, settled before any app sees it: every server of the project
(the daemon's API on ``api.sock`` and TCP, the studio, the connectors' listeners) checks each
request head here, on both of uvicorn's parsers (:mod:`goondan.http_server`).

A request names its host once. Two ``Host`` headers (``Host`` and ``host`` are one name) are
refused: parsers and apps disagree about which one counts (httptools keeps both and the API
read the first, the studio the last), so a request could pass a check made on one name and be
served as the other. An HTTP/1.1 request without ``Host`` is refused too (RFC 9112 asks both).

The request target is a path (origin-form, ``/v1/agents?x=1``). An absolute-form target
(``GET http://127.0.0.1:8080/v1/agents``, what a client sends to a proxy) is served only when
its scheme is ``http`` and its authority is the request's own ``Host``, compared as the server
compares names (case aside); it is then served as its path, the same on both parsers. Any other
authority is refused, so no request is ever served for one host while its ``Host`` names another;
``Host`` itself is then held to each server's allowed names (the daemon's allow-list, the
studio's loopback names). Other forms (``CONNECT host:443``, ``OPTIONS *``) are refused: none of
these servers is a proxy, and none answers for the server as a whole.

Each refusal is a 400 whose message names the problem (code ``HOST_INVALID``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import h11

__all__ = ["NO_HOST", "TWO_HOSTS", "Checked", "CheckedH11Connection", "Refusing", "check_request"]

TWO_HOSTS = "the request has more than one Host header: send exactly one"
NO_HOST = "an HTTP/1.1 request needs a Host header"


@dataclass(frozen=True, slots=True)
class Checked:
    """What :func:`check_request` found: a refusal, or the target to serve."""

    refusal: str | None
    """Why the request is refused (a 400), or ``None``."""
    target: bytes
    """The origin-form target to serve (the request's own, or an absolute-form one's path)."""


def check_request(
    target: bytes, headers: Iterable[tuple[bytes, bytes]], http_version: str
) -> Checked:
    """Check one request head: its ``target`` as sent, its ``headers`` (names in any case)
    and its ``http_version`` (``"1.1"``, ``"1.0"``)."""
    hosts = [value for name, value in headers if name.lower() == b"host"]
    if len(hosts) > 1:
        return Checked(TWO_HOSTS, target)
    if not hosts and http_version not in ("1.0", "0.9"):
        return Checked(NO_HOST, target)
    if target.startswith(b"/"):
        return Checked(None, target)
    return _absolute(target, hosts[0].strip() if hosts else b"")


def _absolute(target: bytes, host: bytes) -> Checked:
    """An absolute-form ``target``: served as its path when it names this server's scheme
    and the request's ``host``."""
    scheme, sep, rest = target.partition(b"://")
    if not sep or not scheme.isalpha():
        shown = _shown(target)
        return Checked(f"the request target {shown} is not a path: send /path", target)
    if scheme.lower() != b"http":
        shown = _shown(scheme + b"://")
        return Checked(f"the request target's scheme {shown} is not this server's (http)", target)
    end = min(
        (i for i in (rest.find(b"/"), rest.find(b"?"), rest.find(b"#")) if i >= 0), default=-1
    )
    authority, tail = (rest, b"") if end < 0 else (rest[:end], rest[end:])
    if not host or authority.lower() != host.lower():
        return Checked(
            f"the request target names {_shown(authority)} but its Host is {_shown(host)}: "
            "send the path alone, or the same host in both",
            target,
        )
    tail = tail.partition(b"#")[0]
    return Checked(None, tail if tail.startswith(b"/") else b"/" + tail)


class Refusing(Protocol):
    """A connection's protocol, which answers a refused head with :attr:`refusal`."""

    refusal: str | None


class CheckedH11Connection(h11.Connection):
    """h11's connection, each request head checked by :mod:`goondan.http_target` (h11 itself
    refuses two ``Host`` headers and a missing one: its refusal is named the same way)."""

    protocol: Refusing | None = None
    """The protocol told why, before the error reaches it."""

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if self.protocol is not None:
                said = str(exc)
                self.protocol.refusal = (
                    TWO_HOSTS if "multiple Host" in said else NO_HOST if "Host" in said else None
                )
            raise
        if isinstance(event, h11.Request):
            checked = check_request(event.target, event.headers, event.http_version.decode("ascii"))
            if checked.refusal is not None:
                if self.protocol is not None:
                    self.protocol.refusal = checked.refusal
                raise h11.RemoteProtocolError(checked.refusal)
            if checked.target != event.target:
                event = h11.Request(
                    method=event.method,
                    target=checked.target,
                    headers=list(event.headers),
                    http_version=event.http_version,
                )
        return event


def _shown(value: bytes) -> str:
    """``value`` quoted for a message, cut short (it is the client's, not ours)."""
    text = value.decode("latin-1")
    return repr(text if len(text) <= 80 else text[:80] + "…")
