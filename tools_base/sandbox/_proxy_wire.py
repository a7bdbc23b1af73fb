"""The network proxy's wire formats: an HTTP proxy request's head (``CONNECT host:port`` and
absolute-form plain HTTP) and SOCKS5's replies. Pure functions of bytes, so every hostile
input is a unit test away."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

from tools_base.sandbox._netpolicy import parse_address, valid_host_name

MAX_HEAD_BYTES = 16 * 1024
"""The longest request head the HTTP proxy reads (431 past it)."""
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)
"""Headers the proxy drops from a plain HTTP request (it sets ``Host`` and ``Connection``)."""


class WireError(Exception):
    """A request the proxy refuses to parse: ``status`` is the HTTP answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """What a client asked the HTTP proxy for."""

    tunnel: bool
    """``CONNECT``: bytes relayed both ways once connected."""
    host: str
    """A host name (lower case) or an IP address (IPv6 without brackets)."""
    port: int
    forward: bytes = b""
    """For plain HTTP: the head to send upstream (origin-form, one request, ``Connection:
    close``)."""


def split_authority(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as ``(host, port)``; :class:`WireError` when malformed."""
    if not text or any(c in text for c in " /?#@\\\t"):
        raise WireError(400, f"malformed authority {text[:80]!r}")
    host, rest = _bracketed(text) if text.startswith("[") else _unbracketed(text)
    port = _port(text, rest, default_port)
    host = host.lower()
    if not valid_host_name(host):
        raise WireError(400, f"{host[:80]!r} is not a host name")
    return host.rstrip(".") if parse_address(host) is None else host, port


def _bracketed(text: str) -> tuple[str, str]:
    """``[v6]`` and what follows it."""
    end = text.find("]")
    host, rest = text[1:end], text[end + 1 :]
    literal = parse_address(host) if end > 0 else None
    if literal is None or literal.version != 6:
        raise WireError(400, f"malformed IPv6 literal in {text[:80]!r}")
    return host, rest


def _unbracketed(text: str) -> tuple[str, str]:
    """A name or IPv4 address and its ``:port``, if any."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        return text, ""
    if ":" in host:
        raise WireError(400, f"an IPv6 literal must be in brackets: {text[:80]!r}")
    return host, ":" + port_text


def _port(text: str, rest: str, default_port: int | None) -> int:
    """The port ``rest`` (``:digits`` or empty) gives, else ``default_port``."""
    if rest:
        digits = rest[1:]
        if not rest.startswith(":") or not digits.isdigit() or len(digits) > 5:
            raise WireError(400, f"malformed port in {text[:80]!r}")
        port = int(digits)
    elif default_port is not None:
        port = default_port
    else:
        raise WireError(400, f"no port in {text[:80]!r}")
    if not 0 < port < 65536:
        raise WireError(400, f"port {port} is out of range")
    return port


def parse_head(head: bytes) -> ProxyRequest:
    """A request head (through its blank line) as a :class:`ProxyRequest`."""
    lines = _head_lines(head)
    method, target, version = _request_line(lines[0])
    headers = _header_fields(lines[1:-2])
    if method == b"CONNECT":
        host, port = split_authority(target)
        return ProxyRequest(tunnel=True, host=host, port=port)
    return _plain_http(method, target, version, headers)


def _head_lines(head: bytes) -> list[bytes]:
    """The head's lines, the two empty ones at its end included."""
    if len(head) > MAX_HEAD_BYTES:
        raise WireError(431, "request head too large")
    lines = head.split(b"\r\n")
    if len(lines) < 3 or lines[-1] or lines[-2]:
        raise WireError(400, "request head does not end with an empty line")
    if any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines):
        # A bare CR or LF is a line end to some servers and not to others: never forwarded.
        raise WireError(400, "a bare CR, LF or NUL in the request head")
    return lines


def _request_line(line: bytes) -> tuple[bytes, str, bytes]:
    """The method, the target (ASCII) and the version of the request line."""
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN:
        raise WireError(400, "malformed request line")
    method, target_b, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise WireError(505, "only HTTP/1.0 and HTTP/1.1 are spoken here")
    try:
        target = target_b.decode("ascii")
    except UnicodeDecodeError:
        raise WireError(400, "request target is not ASCII") from None
    return method, target, version


def _header_fields(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= _TOKEN:
            raise WireError(400, "malformed header line")
        headers.append((name, value.strip()))
    return headers


def _plain_http(
    method: bytes, target: str, version: bytes, headers: list[tuple[bytes, bytes]]
) -> ProxyRequest:
    """An absolute-form ``http://`` request, as the origin-form head to send upstream."""
    if not target.lower().startswith("http://"):
        raise WireError(
            400,
            "the proxy takes CONNECT host:port, or an absolute http:// URL (for https, CONNECT)",
        )
    try:
        url = urlsplit(target)
    except ValueError:
        raise WireError(400, "malformed URL") from None
    if url.username is not None or url.password is not None:
        raise WireError(400, "credentials in the URL are not forwarded")
    host, port = split_authority(url.netloc, 80)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    authority = url.netloc.encode("ascii")
    out = [method + b" " + path.encode("ascii") + b" " + version, b"Host: " + authority]
    out += [n + b": " + v for n, v in headers if n.lower() not in _HOP_BY_HOP]
    out += [b"Connection: close", b"", b""]
    return ProxyRequest(tunnel=False, host=host, port=port, forward=b"\r\n".join(out))


def http_answer(status: int, reason: str) -> bytes:
    """A complete answer of the proxy itself (a refusal or failure), closing the connection."""
    phrase = {
        200: "Connection Established",
        400: "Bad Request",
        403: "Forbidden",
        408: "Request Timeout",
        431: "Request Header Fields Too Large",
        502: "Bad Gateway",
        503: "Service Unavailable",
        504: "Gateway Timeout",
        505: "HTTP Version Not Supported",
    }.get(status, "Error")
    if status == 200:
        return b"HTTP/1.1 200 Connection Established\r\n\r\n"
    body = f"goondan sandbox proxy: {reason}\n".encode("utf-8", "replace")
    safe = reason.encode("ascii", "replace").replace(b"\r", b" ").replace(b"\n", b" ")
    return (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n".encode()
        + b"X-Goondan-Proxy-Refusal: "
        + safe[:300]
        + f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


class Socks(enum.IntEnum):
    """SOCKS5 reply codes (RFC 1928)."""

    SUCCEEDED = 0
    GENERAL_FAILURE = 1
    NOT_ALLOWED = 2
    NETWORK_UNREACHABLE = 3
    HOST_UNREACHABLE = 4
    CONNECTION_REFUSED = 5
    TTL_EXPIRED = 6
    COMMAND_NOT_SUPPORTED = 7
    ADDRESS_TYPE_NOT_SUPPORTED = 8


SOCKS_VERSION = 5
SOCKS_NO_AUTH = 0
SOCKS_NO_METHOD = b"\x05\xff"
SOCKS_CONNECT = 1
ATYP_IPV4, ATYP_NAME, ATYP_IPV6 = 1, 3, 4


def socks_reply(code: Socks) -> bytes:
    """A SOCKS5 reply (the bound address is not disclosed: 0.0.0.0:0)."""
    return struct.pack("!BBBB4sH", SOCKS_VERSION, code, 0, ATYP_IPV4, b"\0\0\0\0", 0)
