"""How the CLI talks to a running daemon: HTTP over the state directory's ``api.sock``, or
over a TCP listener (``run --listen``) named by its :class:`ApiUrl`, with a bearer token.

A small synchronous client on the standard library, so ``status`` and friends start fast and
need nothing beyond the core install. A call is one HTTP/1.1 exchange written and read on the
socket directly, a request answered with server-sent events (``send``) included (importing
``http.client`` and the ``email`` package it parses headers with was a third of the time
``status`` took to start); the event stream, which runs as long as the operator watches, and
a request picked up again after its connection dropped go through ``http.client``. Every call is bounded: no daemon
raises :class:`NoDaemon` at once (over TCP: within :data:`TCP_CONNECT_SECONDS`); a daemon
that takes the request and then dies or falls silent raises :class:`NoAnswer`.

A clustered swarm may have a standby leader: a client given several URLs asks them in order
until one answers (a standby serves nothing until it leads). A leader that dies after taking
a request raises :class:`LeaderLost`, unless the request only reads (``GET``): that one is
asked of the next leader. So is a request with an idempotency key, again and again until its
timeout (:mod:`orchestrator.http.retry`): the daemon runs it once however often it is asked.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import quote, urlsplit

from goondan.errors import DeliveryCode
from orchestrator.http.retry import IDEMPOTENCY_HEADER, check_key, leader_lost, until_answered

if TYPE_CHECKING:
    import http.client

from goondan.errors import DaemonError
from orchestrator.http.client_errors import NoAnswer as NoAnswer
from orchestrator.http.client_errors import NoDaemon as NoDaemon

if TYPE_CHECKING:
    from orchestrator.operations.answers import ErrorBody

_A = TypeVar("_A")

SOCKET_NAME = "api.sock"
CONNECT_RETRY_SECONDS = 10.0
"""How long a client retries a connect the kernel refused for a full backlog."""
DEFAULT_TIMEOUT_SECONDS = 120.0
"""How long a call waits for the daemon's answer (a Turn may take a while)."""
EXIT_NO_ANSWER = 5
"""CLI exit code (network): the daemon went away, or did not answer in time, after taking the
request."""
TCP_CONNECT_SECONDS = 10.0
"""How long connecting to a daemon's TCP listener may take (a host that drops packets)."""


class LeaderLost(NoAnswer):
    """One of several leaders took the request and went away before answering: whether it
    ran is not known, so it is not asked again."""

    code = DeliveryCode.LEADER_LOST


_T = TypeVar("_T")


class EventsRefused(DaemonError, RuntimeError):
    """The daemon answered the event stream's request with an error (``status``, ``body``)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"the daemon answered {status}: {error_text(body)}")
        self.status = status
        self.body = body


class ApiUrl(NamedTuple):
    """A daemon's TCP listener: ``http://HOST:PORT`` (what ``run --listen HOST:PORT`` serves).
    A named tuple, not a dataclass: ``dataclasses`` (and ``inspect`` it imports) would cost
    ``send`` a tenth of its start."""

    host: str
    port: int

    @classmethod
    def parse(cls, value: str) -> ApiUrl:
        """``http://HOST:PORT`` (``[::1]`` for IPv6, a trailing ``/`` allowed); ValueError
        saying what is wrong otherwise."""
        try:
            parts = urlsplit(value.strip())
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{value!r} is not http://HOST:PORT ({exc})") from None
        if parts.scheme == "https":
            raise ValueError(f"{value!r}: the daemon serves plain http://HOST:PORT, not https")
        if parts.scheme != "http":
            raise ValueError(f"{value!r} is not http://HOST:PORT")
        if not parts.hostname or port is None:
            raise ValueError(f"{value!r} is not http://HOST:PORT (a host and a port, both)")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError(f"{value!r} is not http://HOST:PORT (no path, query or user)")
        return cls(parts.hostname, port)

    @property
    def authority(self) -> str:
        """``HOST:PORT`` as the ``Host`` header names it (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"http://{self.authority}"


def socket_path(state_dir: Path) -> Path:
    """Where the API socket of ``state_dir`` lives."""
    return state_dir / SOCKET_NAME


def path_segment(value: str) -> str:
    """``value`` quoted for one segment of a URL path (an agent name, an instance key)."""
    return quote(value, safe="")


def _connect(path: Path, timeout: float | None) -> socket.socket:
    """A socket connected to the daemon's API, retrying while its backlog is full."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + CONNECT_RETRY_SECONDS
    delay = 0.01
    while True:
        try:
            sock.connect(str(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise NoDaemon(f"no daemon is running for {path.parent} (no answer on {path})") from exc
        except BlockingIOError as exc:  # the daemon is busy accepting others: retry shortly
            if exc.errno != errno.EAGAIN or time.monotonic() >= deadline:
                sock.close()
                raise NoAnswer(
                    f"the daemon accepted no connection within {CONNECT_RETRY_SECONDS:g} s"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _connect_tcp(url: ApiUrl, timeout: float | None) -> socket.socket:
    """A socket connected to the daemon's TCP listener at ``url``."""
    connect = TCP_CONNECT_SECONDS if timeout is None else min(timeout, TCP_CONNECT_SECONDS)
    try:
        sock = socket.create_connection((url.host, url.port), timeout=connect)
    except TimeoutError as exc:
        raise NoDaemon(f"no daemon answered at {url} within {connect:g} s") from exc
    except OSError as exc:  # refused, unreachable, a name that does not resolve
        raise NoDaemon(f"no daemon answers at {url} ({exc.strerror or exc})") from exc
    sock.settimeout(timeout)
    return sock


def _unix_connection(path: Path, timeout: float | None) -> http.client.HTTPConnection:
    """An ``http.client`` connection over the daemon's socket (for the event stream)."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = _connect(path, self.timeout)

    return UnixConnection("goondan", timeout=timeout)


class _BadAnswer(Exception):
    """The bytes the daemon sent are no HTTP answer (cut short, or malformed)."""


def _request_bytes(
    method: str,
    target: str,
    payload: bytes | None,
    host: str = "goondan",
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if payload is not None or method in ("POST", "PUT", "PATCH", "DELETE"):
        # The daemon takes no state-changing request without it, a body or not.
        lines.append("Content-Type: application/json")
    if payload is not None:
        lines.append(f"Content-Length: {len(payload)}")
    elif method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (payload or b"")


def _read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """Read one answer: its status and body (by its length, its chunks, or to the end)."""
    status, headers, rest = _read_head(sock)
    return status, b"".join(_body_pieces(sock, headers, rest))


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """An answer's status and headers (names lower-cased), and what came of its body with them."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += _recv(sock, "the answer ended in its headers")
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise _BadAnswer(f"not an HTTP status line: {status_line[:80]!r}")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines)
    }
    return int(parts[1]), headers, body


def _body_pieces(sock: socket.socket, headers: dict[str, str], data: bytes) -> Iterator[bytes]:
    """An answer's body as it arrives (``data``: what came with its head), its chunks undone:
    by its chunks, its length, or to the end of the connection."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            while b"\r\n" not in data:
                data += _recv(sock, "a chunk was cut short")
            size_line, _, data = data.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return
            while len(data) < size + 2:
                data += _recv(sock, "a chunk was cut short")
            yield data[:size]
            data = data[size + 2 :]
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while True:
            yield data[:left]
            left -= len(data)
            if left <= 0:
                return
            data = _recv(sock, "the answer ended before its body did")
    else:  # no length given: the body runs to the end
        yield data
        while chunk := sock.recv(65536):
            yield chunk


def _lines(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a body arriving in ``pieces``, each with its ``\\n``, as each is whole."""
    pending = b""
    for piece in pieces:
        pending += piece
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield pending[start : end + 1]
            start = end + 1
        pending = pending[start:]
    if pending:
        yield pending


def _recv(sock: socket.socket, cut_short: str) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise _BadAnswer(cut_short)
    return chunk


class DaemonApi:
    """The HTTP API of the daemon serving ``state_dir`` (on its ``api.sock``), or of the one
    listening at ``url`` (TCP, with ``token`` as its bearer token); one connection per call."""

    def __init__(
        self,
        state_dir: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        *,
        url: ApiUrl | None = None,
        token: str | None = None,
        standby: Sequence[ApiUrl] = (),
        idempotency_key: str | None = None,
    ) -> None:
        if (state_dir is None) == (url is None):
            raise TypeError("DaemonApi wants a state directory or a url, one of them")
        self.idempotency_key = None if idempotency_key is None else check_key(idempotency_key)
        """Sent as ``Idempotency-Key`` with every request that changes something; with
        several leaders, such a request is asked again until answered (see the module)."""
        self.state_dir = state_dir
        self.url = url
        """The daemon asked (of several leaders, the one that answered last)."""
        self.standby = list(standby)
        """Other leaders of a cluster, asked in order when :attr:`url` does not answer."""
        self.token = token
        self.path = socket_path(state_dir) if state_dir is not None else None
        self.timeout = timeout
        self.reattach_seconds = 0.0
        """How long a streamed request whose daemon went away waits for one to answer again
        (:mod:`orchestrator.http.reattach`)."""

    @property
    def where(self) -> str:
        """The daemon, as errors name it: its URL, or its socket's path."""
        return str(self.url) if self.url is not None else str(self.path)

    def _open(self, timeout: float | None) -> socket.socket:
        if self.url is not None:
            return _connect_tcp(self.url, timeout)
        assert self.path is not None
        return _connect(self.path, timeout)

    @property
    def headers(self) -> dict[str, str]:
        """Sent with every request that changes something (the ``Idempotency-Key``)."""
        return self._headers("POST")

    def _headers(self, method: str) -> dict[str, str]:
        """The headers a request of ``method`` carries besides the usual ones."""
        if self.idempotency_key is None or method in ("GET", "HEAD"):
            return {}
        return {IDEMPOTENCY_HEADER: self.idempotency_key}

    def _each_leader(self, attempt: Callable[[], _T], *, reads_only: bool) -> _T:
        """``attempt()`` at :attr:`url`, then at each standby leader in turn while nobody
        answers there (or, for a request that only reads, while one dies before answering).
        A keyed request that changes something goes round the leaders until answered, within
        :attr:`timeout`."""
        if self.url is None or not self.standby:
            return attempt()
        if reads_only or self.idempotency_key is None:
            return self._leaders_once(attempt, reads_only=reads_only)
        whole = self.timeout

        def once(left: float) -> _T:
            self.timeout = min(whole, left)
            try:  # keyed: a leader lost under it is as safe to leave as a read
                result = self._leaders_once(attempt, reads_only=True)
            finally:
                self.timeout = whole
            if leader_lost(result):  # the next time, the next leader first
                assert self.url is not None
                self.url, self.standby = self.standby[0], [*self.standby[1:], self.url]
            return result

        return until_answered(once, whole, (NoDaemon,))

    def _leaders_once(self, attempt: Callable[[], _T], *, reads_only: bool) -> _T:
        assert self.url is not None
        leaders = [self.url, *self.standby]
        failures: list[str] = []
        for index, url in enumerate(leaders):
            self.url = url
            try:
                result = attempt()
            except NoDaemon as exc:
                failures.append(str(exc))
                continue
            except NoAnswer as exc:
                if not reads_only:
                    raise LeaderLost(
                        f"LEADER_LOST: the leader at {url} went away before answering ({exc}); "
                        "whether the request ran is not known: ask again if it is safe to"
                    ) from exc
                failures.append(str(exc))
                continue
            self.standby = [*leaders[index + 1 :], *leaders[:index]]
            return result
        self.url = leaders[0]
        raise NoDaemon("no leader answers: " + "; ".join(failures))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """``(status, JSON body)`` of one request; raises :class:`NoDaemon` or :class:`NoAnswer`
        (:class:`LeaderLost` from one of several leaders)."""
        return self._each_leader(
            lambda: self._call(method, path, body), reads_only=method in ("GET", "HEAD")
        )

    def answer(
        self, method: str, path: str, kind: type[_A], body: dict[str, Any] | None = None
    ) -> tuple[int, _A | ErrorBody]:
        """``(status, answer)`` of one request: its body read into ``kind``
        (:mod:`orchestrator.operations.answers`), or into the error body past a 400;
        raises as :meth:`call` does, and :class:`NoAnswer` for a body that is not one (a
        daemon of another version)."""
        import msgspec

        from orchestrator.operations.answers import ErrorBody
        from orchestrator.operations.encoding import convert

        status, data = self.call(method, path, body)
        try:
            if status >= 400:
                return status, convert(data, ErrorBody)
            return status, convert(data, kind)
        except msgspec.ValidationError as exc:
            raise NoAnswer(f"the daemon's answer is not understood: {exc}") from exc

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body).encode()
        sock = self._open(self.timeout)
        host = self.url.authority if self.url is not None else "goondan"
        try:
            extra = self._headers(method)
            sock.sendall(_request_bytes(method, path, payload, host, self.token, extra))
            status, data = _read_answer(sock)
        except TimeoutError as exc:
            raise NoAnswer(f"the daemon did not answer within {self.timeout:g} s") from exc
        except (_BadAnswer, ValueError, OSError) as exc:
            # Reset, broken pipe, a connection closed mid-answer: the daemon died under us.
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else "closed"
            raise NoAnswer(f"the daemon went away before answering ({detail})") from exc
        finally:
            sock.close()
        try:
            return status, json.loads(data) if data else None
        except ValueError as exc:
            raise NoAnswer("the daemon sent an answer that is not JSON") from exc

    def call_with_events(
        self,
        path: str,
        body: dict[str, Any],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> tuple[int, Any]:
        """``POST path`` with ``body``, for a request that may answer with server-sent events
        (``"stream"`` or ``"approvals"`` set): ``on_event(kind, data)`` gets each event but the
        last as it arrives, and the result is ``(status, JSON body)`` as :meth:`call` would
        answer without events (the ``answer`` event's data, 200 when it is ``ok``, else 502).

        Each read waits at most :attr:`timeout`: an event stream sends a keepalive well within
        that, so only a daemon that fell silent (or died) raises :class:`NoAnswer`.
        """
        return self._each_leader(
            lambda: self._call_with_events(path, body, on_event), reads_only=False
        )

    def _call_with_events(
        self,
        path: str,
        body: dict[str, Any],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> tuple[int, Any]:
        # On the socket, as _call: `send` starts without http.client (and the email package).
        from orchestrator.http.reattach import Progress

        progress = Progress()
        sock = self._open(self.timeout)  # raises NoDaemon itself; past it, the daemon went away
        host = self.url.authority if self.url is not None else "goondan"
        try:
            payload = json.dumps(body).encode()
            extra = self._headers("POST")
            sock.sendall(_request_bytes("POST", path, payload, host, self.token, extra))
            status, headers, rest = _read_head(sock)
            progress.request_id = headers.get("x-goondan-request-id", "")
            pieces = _body_pieces(sock, headers, rest)
            if not headers.get("content-type", "").startswith("text/event-stream"):
                data = b"".join(pieces)
                return status, json.loads(data) if data else None
            answer = progress.follow(_lines(pieces), on_event)
            if answer is not None:
                return answer
            failure = NoAnswer("the daemon ended the answer's event stream before the answer")
        except TimeoutError as exc:
            failure = NoAnswer(f"the daemon fell silent for {self.timeout:g} s")
            failure.__cause__ = exc
        except (_BadAnswer, OSError, ValueError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else "closed"
            failure = NoAnswer(f"the daemon went away before answering ({detail})")
            failure.__cause__ = exc
        finally:
            sock.close()
        if not progress.request_id and self.idempotency_key is None:
            raise failure
        # The request was accepted (and recorded), or its key makes sending it again safe:
        # pick its answer up by its id, or by its key.
        from orchestrator.http.reattach import reattach

        return reattach(self, progress, on_event, failure, (path, body))

    def http_connection(self, timeout: float | None = -1.0) -> http.client.HTTPConnection:
        """An ``http.client`` connection to the daemon, not yet connected (``timeout`` for
        each read; the default: :attr:`timeout`)."""
        import http.client

        wait = self.timeout if timeout == -1.0 else timeout
        if self.url is not None:
            return http.client.HTTPConnection(self.url.host, self.url.port, timeout=wait)
        assert self.path is not None
        return _unix_connection(self.path, wait)

    def connect(self, connection: http.client.HTTPConnection) -> None:
        """Connect ``connection``; raises :class:`NoDaemon` when no daemon is there."""
        if self.url is not None:
            connection.sock = _connect_tcp(self.url, self.timeout)
        else:
            connection.connect()

    def http_headers(self) -> dict[str, str]:
        """The headers every ``http.client`` request carries (host, token)."""
        headers: dict[str, str] = {}
        if self.url is not None:
            headers["Host"] = self.url.authority
            if self.token is not None:
                headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def events(self, query: str = "") -> Iterator[dict[str, Any]] | None:
        """The daemon's live events (``GET /v1/events``), or ``None`` when none serves them.

        Returns once the stream is open, so events read from the log file afterwards and
        events pushed here overlap rather than leave a gap.
        """
        try:
            return self.open_events(query)
        except DaemonError:
            return None

    def open_events(self, query: str = "") -> Iterator[dict[str, Any]]:
        """:meth:`events`, or why not: :class:`NoDaemon`, or :class:`EventsRefused` with the
        daemon's status (401 without the token it wants)."""
        return self._each_leader(lambda: self._open_events(query), reads_only=True)

    def _open_events(self, query: str) -> Iterator[dict[str, Any]]:
        import http.client

        headers = {"Accept": "text/event-stream"}
        if self.url is not None:
            connection = http.client.HTTPConnection(self.url.host, self.url.port, timeout=None)
            if self.token is not None:
                headers["Authorization"] = f"Bearer {self.token}"
        else:
            assert self.path is not None
            connection = _unix_connection(self.path, timeout=None)  # it runs as long as watched
        try:
            if self.url is not None:  # connect under a deadline; the stream has none
                connection.sock = _connect_tcp(self.url, None)
            connection.request("GET", f"/v1/events{query}", headers=headers)
            response = connection.getresponse()
            if response.status != 200:
                data = response.read(65536)
                connection.close()
                try:
                    body = json.loads(data)
                except ValueError:
                    body = data.decode("utf-8", "replace")
                raise EventsRefused(response.status, body)
            if response.readline().strip() != b": connected":
                connection.close()
                raise NoAnswer("the daemon's event stream did not open")
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise NoDaemon(f"no event stream from the daemon at {self.where}: {exc}") from exc
        except DaemonError:
            connection.close()
            raise

        def stream() -> Iterator[dict[str, Any]]:
            try:
                for raw in response:
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    if line.startswith("data: {"):
                        event = json.loads(line.removeprefix("data: "))
                        if isinstance(event, dict):
                            yield event
            except (OSError, http.client.HTTPException):
                return  # the daemon stopped
            finally:
                connection.close()

        return stream()


def error_text(body: Any) -> str:
    """The message of an API error body ``{"error": {"code", "message"}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('message')} ({error.get('code')})"
    return str(error or body)
