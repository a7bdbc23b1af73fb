"""``http-fetch``: HTTP GET and POST to public web servers, with SSRF protection.

Exports (required parameters in **bold**):

``get``: **url**, ``headers`` (object; numbers and booleans are stringified, other values
    dropped), ``timeoutMs`` (default 30000, at most 300000, covers redirects and the body),
    ``maxBytes`` (default 500000, ≥ 1, capped by config ``maxResponseBytes``).
``post``: the same plus ``body`` (object, sent as JSON with ``content-type:
    application/json`` unless ``headers`` sets a content type) or ``bodyString`` (raw text,
    used only without ``body``).

Both return ``{url, method, status, statusText, headers, body, truncated, durationMs,
finalUrl, redirects}``: ``url`` as requested, ``finalUrl`` after redirects, ``redirects``
how many were followed, ``headers`` with lower-case names (repeated ones joined by ``", "``),
``body`` the first ``maxBytes`` bytes decoded with the response charset (UTF-8 by default,
invalid bytes replaced) and ``truncated`` whether more was sent. 4xx and 5xx responses are
data, not errors.

Safety:

* Only ``http`` and ``https`` URLs, without user:password.
* Before any connection, the host is resolved and **every** address checked. Loopback,
  private, link-local, multicast, reserved, unspecified and other non-public addresses are
  refused, and so are cloud metadata endpoints (``169.254.169.254``, ``fd00:ec2::254``, ...)
  and IPv6 forms that embed such an IPv4 address (``::ffff:127.0.0.1``, 6to4, Teredo, NAT64).
* The connection goes to an address that passed the check (never a second DNS lookup), with
  the URL's host in the ``Host`` header and in TLS SNI and certificate verification, so DNS
  rebinding between check and connect cannot redirect it.
* Redirects (301, 302, 303, 307, 308) are followed by hand, at most config ``maxRedirects``,
  and every hop is checked again. 303, and 301/302 after a POST, continue as a body-less GET;
  ``authorization``, ``cookie`` and ``proxy-authorization`` are dropped when the origin
  changes. Environment proxy settings are not used.

Config (``configure``):

``allowPrivateNetworks`` (bool, default false) skip the address check, except for cloud
    metadata endpoints, which stay refused.
``allowedHosts`` (list of ``host`` or ``host:port``, ``[v6]:port`` for IPv6; default empty)
    hosts exempt from every address check: for intranet services and tests.
``maxRedirects`` (int ≥ 0, default 5) redirects followed; 0 returns the 3xx response as is.
``maxResponseBytes`` (int, default 10485760) upper bound for ``maxBytes``.

Error codes: ``E_HTTP_INVALID_URL``, ``E_HTTP_UNSUPPORTED_PROTOCOL``,
``E_HTTP_FORBIDDEN_ADDRESS`` (names the host and the address), ``E_HTTP_DNS_FAILED``,
``E_HTTP_CONNECTION_FAILED``, ``E_HTTP_TLS_ERROR``, ``E_HTTP_TIMEOUT``,
``E_HTTP_TOO_MANY_REDIRECTS``, ``E_HTTP_INVALID_HEADER``, ``E_HTTP_PROTOCOL_ERROR``,
``E_TOOL_INVALID_ARGS``.

Handlers are synchronous (``http.client``): the executor runs them in a worker thread.
"""

from __future__ import annotations

import codecs
import contextlib
import http.client
import ipaddress
import json
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import SplitResult, quote, urljoin, urlsplit

from goondan.errors import ToolCode
from tools_base import (
    JsonObject,
    JsonValue,
    ToolConfigError,
    ToolContext,
    ToolError,
    ToolHandler,
)
from tools_base.tools._common import (
    ConfigReader,
    invalid_arg,
    optional_number,
    optional_object,
    optional_string,
    positive_int,
    primitive_to_string,
    require_string,
)

DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000
DEFAULT_MAX_BYTES = 500_000
USER_AGENT = "goondan-http-fetch/0.1"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
_CHUNK = 64 * 1024
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def forbidden_reason(ip: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why connecting to ``ip`` is refused, or ``None`` when it is allowed."""
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata endpoint"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        inner = (
            None if embedded is None else forbidden_reason(embedded, allow_private=allow_private)
        )
        if inner is not None:
            return f"an IPv6 form of {embedded}, {inner}"
    if allow_private:
        return None
    checks = (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "a site-local address"),
        (not ip.is_global, "not a public address"),
    )
    return next((reason for hit, reason in checks if hit), None)


@dataclass(frozen=True, slots=True)
class HttpFetchConfig:
    """Parsed Tool config."""

    allow_private_networks: bool = False
    allowed_hosts: frozenset[tuple[str, int | None]] = field(default_factory=frozenset)
    max_redirects: int = 5
    max_response_bytes: int = 10 * 1024 * 1024


def parse_host_entry(entry: str) -> tuple[str, int | None]:
    """``"example.com"``, ``"example.com:8080"``, ``"[::1]:8080"`` or ``"::1"`` → (host, port)."""
    text = entry.strip().lower()
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad host entry {entry!r}")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad host entry {entry!r}")
        port = int(rest[1:]) if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = int(port_text)
    if not host or (port is not None and not 0 < port < 65536):
        raise ValueError(f"bad host entry {entry!r}")
    return host, port


@dataclass(frozen=True, slots=True)
class Url:
    raw: str
    scheme: str
    host: str
    port: int
    target: str
    """Path and query, percent-encoded where needed."""

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def parse_url(raw: str) -> Url:
    """Split and check a URL; refuse other schemes and embedded credentials."""
    try:
        parts: SplitResult = urlsplit(raw.strip())
        port = parts.port
    except ValueError as exc:
        raise ToolError(f"Invalid URL: {raw}", code=ToolCode.E_HTTP_INVALID_URL) from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ToolError(
            f"Unsupported protocol '{scheme}:'. Only http: and https: are allowed.",
            code=ToolCode.E_HTTP_UNSUPPORTED_PROTOCOL,
            suggestion="Use an http:// or https:// URL.",
        )
    if not parts.hostname:
        raise ToolError(f"Invalid URL (no host): {raw}", code=ToolCode.E_HTTP_INVALID_URL)
    if parts.username is not None or parts.password is not None:
        raise ToolError(
            f"Invalid URL (credentials are not allowed in the URL): {raw}",
            code=ToolCode.E_HTTP_INVALID_URL,
            suggestion="Send credentials in an Authorization header instead.",
        )
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return Url(
        raw=raw,
        scheme=scheme,
        host=parts.hostname,
        port=port if port is not None else (443 if scheme == "https" else 80),
        target=quote(target, safe=_URL_SAFE),
    )


_SockAddr = tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]
AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, _SockAddr]
"""One ``socket.getaddrinfo`` result."""


def vet_addresses(
    url: Url,
    *,
    allow_private: bool = False,
    allowed_hosts: frozenset[tuple[str, int | None]] = frozenset(),
) -> list[AddrInfo]:
    """Resolve ``url.host`` and vet every address; a connection may use only these.

    Hosts in ``allowed_hosts`` (``(host, None)`` for any port) skip the check. Raises a
    ToolError ``E_HTTP_DNS_FAILED`` or ``E_HTTP_FORBIDDEN_ADDRESS``.
    """
    try:
        infos: list[AddrInfo] = list(
            socket.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise ToolError(
            f"could not resolve host {url.host!r}: {exc}",
            code=ToolCode.E_HTTP_DNS_FAILED,
            suggestion="Check the host name in the URL.",
        ) from exc
    if (url.host, None) in allowed_hosts or (url.host, url.port) in allowed_hosts:
        return infos
    for info in infos:
        address = str(info[4][0])
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        reason = forbidden_reason(ip, allow_private=allow_private)
        if reason is not None:
            resolved = "" if address == url.host else f" (resolves to {address})"
            raise ToolError(
                f"refusing to connect to {url.host!r}{resolved}: {reason}",
                code=ToolCode.E_HTTP_FORBIDDEN_ADDRESS,
                suggestion=(
                    "Only public internet addresses can be reached. An operator can allow "
                    "a host with the Tool config allowedHosts (host or host:port)."
                ),
            )
    return infos


class PinnedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection to already vetted addresses, named by the URL's host.

    ``Host`` header, TLS SNI and certificate checks use ``host``; the socket connects to one
    of ``addresses`` (``getaddrinfo`` results) and nowhere else, without resolving again.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        addresses: list[AddrInfo],
        tls: ssl.SSLContext | None,
        timeout: float,
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses
        self._tls = tls
        if tls is not None:
            self.default_port = 443

    def connect(self) -> None:
        error: OSError = OSError(f"no address to connect to for {self.host!r}")
        for family, kind, proto, _, sockaddr in self._addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout)
                sock.connect(sockaddr)
                break
            except OSError as exc:
                sock.close()
                error = exc
        else:
            raise error
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock


class HttpFetchTool:
    """The handlers, bound to one config."""

    def __init__(self, config: HttpFetchConfig) -> None:
        self.config = config
        self._tls = ssl.create_default_context()

    def _addresses(self, url: Url) -> list[AddrInfo]:
        return vet_addresses(
            url,
            allow_private=self.config.allow_private_networks,
            allowed_hosts=self.config.allowed_hosts,
        )

    def _fetch(
        self,
        method: str,
        raw_url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout_ms: float,
        max_bytes: int,
    ) -> JsonObject:
        started = time.monotonic()
        deadline = started + min(timeout_ms, MAX_TIMEOUT_MS) / 1000
        url = parse_url(raw_url)
        redirects = 0
        while True:
            with network_errors(url):
                conn = self._open(url, deadline)
            response: http.client.HTTPResponse | None = None
            try:
                with network_errors(url):
                    response, sock = self._send(conn, url, method, headers, body, deadline)
                location = response.getheader("location")
                follow = (
                    response.status in REDIRECT_STATUSES
                    and location
                    and self.config.max_redirects > 0
                )
                if not follow:
                    with network_errors(url):
                        text, truncated = self._read_body(sock, response, max_bytes, deadline)
                    return {
                        "url": raw_url,
                        "method": method,
                        "status": response.status,
                        "statusText": response.reason,
                        "headers": _response_headers(response),
                        "body": text,
                        "truncated": truncated,
                        "durationMs": round((time.monotonic() - started) * 1000),
                        "finalUrl": _url_text(url),
                        "redirects": redirects,
                    }
                status = response.status
            finally:
                if response is not None:
                    response.close()
                conn.close()
            redirects += 1
            if redirects > self.config.max_redirects:
                raise ToolError(
                    f"too many redirects (more than {self.config.max_redirects}) from {raw_url}",
                    code=ToolCode.E_HTTP_TOO_MANY_REDIRECTS,
                )
            next_url = parse_url(urljoin(_url_text(url), str(location)))
            if next_url.origin != url.origin:
                headers = {k: v for k, v in headers.items() if k.lower() not in SENSITIVE_HEADERS}
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            url = next_url

    def _open(self, url: Url, deadline: float) -> PinnedConnection:
        addresses = self._addresses(url)
        return PinnedConnection(
            url.host,
            url.port,
            addresses=addresses,
            tls=self._tls if url.scheme == "https" else None,
            timeout=remaining(deadline),
        )

    def _send(
        self,
        conn: PinnedConnection,
        url: Url,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
        deadline: float,
    ) -> tuple[http.client.HTTPResponse, socket.socket]:
        """Send the request; the response, and the socket to set read deadlines on.

        ``getresponse`` detaches the socket from ``conn`` when the server will close it, so
        the socket is taken before that.
        """
        conn.connect()  # outside the ValueError handler: a certificate error is a ValueError
        sock = conn.sock
        try:
            conn.request(method, url.target, body=body, headers=headers)
        except ValueError as exc:
            raise ToolError(
                f"invalid request header: {exc}", code=ToolCode.E_HTTP_INVALID_HEADER
            ) from exc
        sock.settimeout(remaining(deadline))
        return conn.getresponse(), sock

    def _read_body(
        self,
        sock: socket.socket,
        response: http.client.HTTPResponse,
        max_bytes: int,
        deadline: float,
    ) -> tuple[str, bool]:
        """At most ``max_bytes`` of the body, read in chunks so the deadline holds throughout."""
        chunks: list[bytes] = []
        wanted = max_bytes + 1
        while wanted > 0:
            sock.settimeout(remaining(deadline))
            chunk = response.read1(min(wanted, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
        data = b"".join(chunks)
        truncated = len(data) > max_bytes
        charset = response.headers.get_content_charset() or "utf-8"
        try:
            decoder = codecs.getincrementaldecoder(charset)(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(data[:max_bytes], final=not truncated), truncated

    def get(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``get``: an HTTP GET."""
        url, headers, timeout_ms, max_bytes = self._common_input(input)
        return self._fetch("GET", url, headers, None, timeout_ms, max_bytes)

    def post(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``post``: an HTTP POST with a JSON or raw body."""
        url, headers, timeout_ms, max_bytes = self._common_input(input)
        body_object = optional_object(input, "body")
        body_string = optional_string(input, "bodyString")
        body: bytes | None = None
        if body_object is not None:
            body = json.dumps(body_object, ensure_ascii=False, separators=(",", ":")).encode()
            if not any(k.lower() == "content-type" for k in headers):
                headers["content-type"] = "application/json"
        elif body_string:
            body = body_string.encode("utf-8", errors="surrogatepass")
        return self._fetch("POST", url, headers, body, timeout_ms, max_bytes)

    def _common_input(self, input: JsonObject) -> tuple[str, dict[str, str], float, int]:
        url = require_string(input, "url")
        headers: dict[str, str] = {}
        for key, value in (optional_object(input, "headers") or {}).items():
            text = primitive_to_string(value)
            if text is not None:
                headers[key] = text
        if not any(k.lower() == "user-agent" for k in headers):
            headers["user-agent"] = USER_AGENT
        timeout = optional_number(input, "timeoutMs")
        if timeout is not None and timeout <= 0:
            raise invalid_arg("'timeoutMs' must be greater than 0")
        max_bytes = positive_int(input, "maxBytes", DEFAULT_MAX_BYTES)
        return (
            url,
            headers,
            DEFAULT_TIMEOUT_MS if timeout is None else timeout,
            min(max_bytes, self.config.max_response_bytes),
        )

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        return {"get": self.get, "post": self.post}


def _url_text(url: Url) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    default = 443 if url.scheme == "https" else 80
    netloc = host if url.port == default else f"{host}:{url.port}"
    return f"{url.scheme}://{netloc}{url.target}"


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _response_headers(response: http.client.HTTPResponse) -> JsonObject:
    out: JsonObject = {}
    for name, value in response.getheaders():
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


@contextlib.contextmanager
def network_errors(url: Url) -> Iterator[None]:
    """Map socket, TLS and HTTP exceptions to ToolErrors with ``E_HTTP_*`` codes."""
    where = f" ({url.host}:{url.port})"
    try:
        yield
    except TimeoutError as exc:
        raise ToolError(
            f"request timed out{where}",
            code=ToolCode.E_HTTP_TIMEOUT,
            suggestion="Retry later, or raise timeoutMs (at most 300000).",
        ) from exc
    except (ssl.SSLError, ssl.CertificateError) as exc:
        raise ToolError(f"TLS error{where}: {exc}", code=ToolCode.E_HTTP_TLS_ERROR) from exc
    except http.client.InvalidURL as exc:
        raise ToolError(f"Invalid URL: {exc}", code=ToolCode.E_HTTP_INVALID_URL) from exc
    except http.client.RemoteDisconnected as exc:
        raise ToolError(
            f"connection failed{where}: the server closed it without answering",
            code=ToolCode.E_HTTP_CONNECTION_FAILED,
            suggestion="Retry later.",
        ) from exc
    except http.client.HTTPException as exc:
        raise ToolError(
            f"malformed HTTP response{where}: {type(exc).__name__} {exc}",
            code=ToolCode.E_HTTP_PROTOCOL_ERROR,
        ) from exc
    except OSError as exc:
        raise ToolError(
            f"connection failed{where}: {exc.strerror or exc}",
            code=ToolCode.E_HTTP_CONNECTION_FAILED,
        ) from exc


def configure(config: JsonObject) -> dict[str, ToolHandler]:
    """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
    reader = ConfigReader("http-fetch", config)
    entries = reader.strings("allowedHosts")
    try:
        allowed = frozenset(parse_host_entry(e) for e in entries)
    except ValueError as exc:
        raise ToolConfigError(f"http-fetch config 'allowedHosts': {exc}") from exc
    parsed = HttpFetchConfig(
        allow_private_networks=reader.flag("allowPrivateNetworks", False),
        allowed_hosts=allowed,
        max_redirects=reader.integer("maxRedirects", 5, minimum=0),
        max_response_bytes=reader.integer("maxResponseBytes", 10 * 1024 * 1024),
    )
    reader.finish()
    return HttpFetchTool(parsed).handlers()


handlers = configure({})
