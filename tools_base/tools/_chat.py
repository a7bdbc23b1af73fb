"""What the ``telegram`` and ``slack`` tools share: the bot token, the HTTPS client, downloads.

**Token.** Looked up at every call, in this order: the Tool config ``token`` (a value source:
``{value: ...}``, ``{valueFrom: {env: NAME}}`` or ``{valueFrom: {secretRef: {ref:
Secret/<name>, key}}}``, read from the environment like every other secret of a swarm), then
the tool's environment variables in their documented order. A configured ``token`` that points
at nothing is an error naming the variable; it does not fall back to the environment, so a
typo cannot silently post as another bot. The model never passes a token (it would be kept in
the conversation). The token never appears in a result, an error, a log line or an exception
chain: every error leaving a handler is scrubbed of it.

**Network.** Every request goes through the same policy as ``http-fetch``: the host is resolved
once, every address vetted (loopback, private, link-local and metadata addresses refused unless
the config's ``allowedHosts`` or ``allowPrivateNetworks`` says otherwise), and the connection
pinned to a vetted address. A configured ``apiBaseUrl`` goes through the same check on every
call, and a plain ``http:`` base URL is accepted only for a host listed in ``allowedHosts``
(a token must not cross the internet in clear text). A tool may share settings with its
connector (:class:`SharedSettings`: ``TELEGRAM_API_BASE_URL``, ...), read from the environment
at every call like the token, so one setting points the Connection and the tool at one server. Redirects are not followed. One deadline
(``timeoutMs``) covers connecting, sending and reading the whole answer.

**Downloads** are capped (``maxBytes``, at most config ``maxDownloadBytes``) while they stream;
a file announced or found larger fails with ``E_CHAT_FILE_TOO_LARGE``. ``savePath`` is
confined to the instance workdir like ``file-system`` paths (``E_CHAT_PATH_OUTSIDE_WORKDIR``,
also for an existing file with more than one hard link; ``E_FS_NOT_A_FILE`` for a FIFO, socket
or device there).
"""

from __future__ import annotations

import base64
import errno
import http.client
import json
import mimetypes
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from goondan.errors import ToolCode
from goondan.loopback import is_loopback
from tools_base import JsonObject, ToolConfigError, ToolContext, ToolError
from tools_base.tools._chat_token import REDACTED as REDACTED
from tools_base.tools._chat_token import TokenSource as TokenSource
from tools_base.tools._chat_token import parse_token_source
from tools_base.tools._chat_token import redact as redact
from tools_base.tools._chat_token import resolve_token as resolve_token
from tools_base.tools._common import (
    ConfigReader,
    invalid_arg,
    optional_bool,
    optional_number,
    optional_string,
    positive_int,
)
from tools_base.tools._sandbox import Workspace, pinned_workspace
from tools_base.tools.http_fetch import (
    PinnedConnection,
    Url,
    network_errors,
    parse_host_entry,
    parse_url,
    remaining,
    vet_addresses,
)

DEFAULT_TIMEOUT_MS = 15_000
MAX_TIMEOUT_MS = 300_000
DEFAULT_DOWNLOAD_BYTES = 3_000_000
MAX_DOWNLOAD_BYTES = 20_000_000
MAX_API_ANSWER_BYTES = 10 * 1024 * 1024
"""An API answer larger than this is not read (a 1000-message history is far below it)."""
USER_AGENT = "goondan-chat-tools/0.1"

BAD_RESPONSE = ToolCode.E_CHAT_BAD_RESPONSE
FILE_TOO_LARGE = ToolCode.E_CHAT_FILE_TOO_LARGE
OUTSIDE_WORKDIR = ToolCode.E_CHAT_PATH_OUTSIDE_WORKDIR
SETTING_INVALID = ToolCode.E_CHAT_SETTING_INVALID

_CHUNK = 64 * 1024
T = TypeVar("T")


# -- config ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatConfig:
    """Config keys both tools take."""

    tool: str
    api_base: Url
    token: TokenSource | None = None
    allow_private_networks: bool = False
    allowed_hosts: frozenset[tuple[str, int | None]] = field(default_factory=frozenset)
    max_download_bytes: int = MAX_DOWNLOAD_BYTES
    shared: SharedSettings | None = None
    """Settings read from the environment at every call (:func:`with_shared_settings`)."""
    base_configured: bool = True
    """Whether the config named ``apiBaseUrl`` (it then wins over ``shared.base_url``)."""

    def allows_host(self, url: Url) -> bool:
        """Whether ``allowedHosts`` lists the URL's host (any port, or its port)."""
        return (url.host, None) in self.allowed_hosts or (url.host, url.port) in self.allowed_hosts


@dataclass(frozen=True, slots=True)
class SharedSettings:
    """The environment variables a tool shares with its connector (``TELEGRAM_API_BASE_URL``,
    ...), so one setting points both at the same API server."""

    base_url: str
    """The API base URL; the config ``apiBaseUrl`` wins over it."""
    allowed_hosts: str
    """``host[:port]`` entries, comma or space separated, added to ``allowedHosts``."""
    allow_plain_http: str | None = None
    """A yes/no variable letting ``base_url`` use plain http off this machine."""


def _setting_error(tool: str, name: str, detail: str) -> ToolError:
    return ToolError(
        f"[{tool}] environment variable {name}: {detail}",
        code=SETTING_INVALID,
        suggestion="Ask the operator to fix the setting; do not retry until then.",
    )


def _env_hosts(tool: str, name: str, environ: Mapping[str, str]) -> set[tuple[str, int | None]]:
    entries = [e for e in re.split(r"[\s,]+", environ.get(name, "")) if e]
    try:
        return {parse_host_entry(e) for e in entries}
    except ValueError as exc:
        raise _setting_error(tool, name, str(exc)) from None


def with_shared_settings(
    config: ChatConfig, environ: Mapping[str, str] | None = None
) -> ChatConfig:
    """``config`` with what its connector reads from the environment added: the hosts of
    ``shared.allowed_hosts``, and, unless the config names ``apiBaseUrl``, the base URL of
    ``shared.base_url``, trusted like an ``allowedHosts`` entry when the connector would reach
    it too (https; plain http to a loopback host, to a listed host, or with
    ``shared.allow_plain_http``): the operator named that server.

    Read at every call, as the token is: a tool module is loaded before its process gets its
    own environment. A bad value raises ``E_CHAT_SETTING_INVALID`` naming the variable.
    """
    shared = config.shared
    if shared is None:
        return config
    env = os.environ if environ is None else environ
    hosts = set(config.allowed_hosts) | _env_hosts(config.tool, shared.allowed_hosts, env)
    base = config.api_base
    text = env.get(shared.base_url, "").strip().rstrip("/")
    if text and not config.base_configured:
        base = _shared_base(config, shared, text, hosts, env)
        hosts.add((base.host, base.port))
    return replace(config, api_base=base, allowed_hosts=frozenset(hosts), shared=None)


def _shared_base(
    config: ChatConfig,
    shared: SharedSettings,
    text: str,
    hosts: set[tuple[str, int | None]],
    env: Mapping[str, str],
) -> Url:
    """The connector's base URL ``text``, refused in plain http off this machine unless
    ``hosts`` lists it or the connector's plain-http setting allows it."""
    try:
        base = parse_url(text)
    except ToolError as exc:
        raise _setting_error(config.tool, shared.base_url, exc.message) from None
    listed = (base.host, None) in hosts or (base.host, base.port) in hosts
    plain = shared.allow_plain_http is not None and env.get(
        shared.allow_plain_http, ""
    ).strip().lower() in {"1", "true", "yes", "on"}
    if base.scheme == "http" and not (listed or plain or is_loopback(base.host)):
        raise _setting_error(
            config.tool,
            shared.base_url,
            f"{text!r} uses plain http off this machine, so the token would travel "
            f"unencrypted; use https, or list the host in {shared.allowed_hosts}",
        )
    return base


def read_chat_config(
    reader: ConfigReader, tool: str, default_base: str, shared: SharedSettings | None = None
) -> ChatConfig:
    """Read the shared keys; the caller reads its own and calls ``reader.finish()``.

    With ``shared``, what the tool's connector reads from the environment counts at every
    call too (:func:`with_shared_settings`).
    """
    raw_token = reader.raw("token")
    token = None if raw_token is None else parse_token_source(tool, raw_token)
    try:
        allowed = frozenset(parse_host_entry(e) for e in reader.strings("allowedHosts"))
    except ValueError as exc:
        raise ToolConfigError(f"{tool} config 'allowedHosts': {exc}") from exc
    base_text = reader.raw("apiBaseUrl")
    base_configured = base_text is not None
    base_text = default_base if base_text is None else base_text
    if not isinstance(base_text, str) or not base_text.strip():
        raise ToolConfigError(f"{tool} config 'apiBaseUrl' must be a URL string")
    try:
        base = parse_url(base_text.strip().rstrip("/"))
    except ToolError as exc:
        raise ToolConfigError(f"{tool} config 'apiBaseUrl': {exc.message}") from exc
    config = ChatConfig(
        tool=tool,
        api_base=base,
        token=token,
        allow_private_networks=reader.flag("allowPrivateNetworks", False),
        allowed_hosts=allowed,
        max_download_bytes=reader.integer("maxDownloadBytes", MAX_DOWNLOAD_BYTES),
        shared=shared,
        base_configured=base_configured,
    )
    if base.scheme == "http" and not config.allows_host(base):
        raise ToolConfigError(
            f"{tool} config 'apiBaseUrl' {base_text!r} uses plain http: the bot token would "
            "travel unencrypted; use https, or list the host in 'allowedHosts' (a local server)"
        )
    return config


# -- call input ------------------------------------------------------------------------------


def timeout_ms(input: JsonObject) -> float:
    """``timeoutMs`` (default 15000, at most 300000)."""
    value = optional_number(input, "timeoutMs")
    if value is None:
        return DEFAULT_TIMEOUT_MS
    if value <= 0:
        raise invalid_arg("'timeoutMs' must be greater than 0")
    return min(value, MAX_TIMEOUT_MS)


def deadline_of(input: JsonObject) -> float:
    """The monotonic deadline of this call."""
    return time.monotonic() + timeout_ms(input) / 1000


@dataclass(frozen=True, slots=True)
class DownloadOptions:
    """What a ``downloadFile`` call asked for."""

    max_bytes: int
    include_base64: bool
    include_data_url: bool
    save_path: str | None


def download_options(input: JsonObject, config: ChatConfig) -> DownloadOptions:
    """``maxBytes`` (default 3000000, at most 20000000), ``includeBase64``, ...``savePath``."""
    max_bytes = positive_int(input, "maxBytes", DEFAULT_DOWNLOAD_BYTES)
    limit = min(config.max_download_bytes, MAX_DOWNLOAD_BYTES)
    if max_bytes > limit:
        raise invalid_arg(f"'maxBytes' must be at most {limit}")
    save_path = optional_string(input, "savePath")
    return DownloadOptions(
        max_bytes=max_bytes,
        include_base64=optional_bool(input, "includeBase64", True),
        include_data_url=optional_bool(input, "includeDataUrl", True),
        save_path=save_path or None,
    )


# -- HTTP ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer, read whole (within its cap)."""

    status: int
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes


class TooLarge(Exception):
    """The answer is over the cap; ``size`` is what is known of it (announced or read so far)."""

    def __init__(self, size: int, announced: bool) -> None:
        super().__init__(size)
        self.size = size
        self.announced = announced


class ChatHttp:
    """HTTPS requests under the SSRF policy of one tool's config."""

    def __init__(self, config: ChatConfig) -> None:
        self._config = config
        self._tls = ssl.create_default_context()

    @property
    def config(self) -> ChatConfig:
        """The config with the environment's shared settings of now."""
        return with_shared_settings(self._config)

    def url(self, path: str) -> Url:
        """The API base URL with ``path`` appended (``path`` starts with ``/``)."""
        base = self.config.api_base
        prefix = base.target.split("?", 1)[0].rstrip("/")
        return Url(
            raw=base.raw, scheme=base.scheme, host=base.host, port=base.port, target=prefix + path
        )

    def exchange(
        self,
        method: str,
        url: Url,
        *,
        headers: Mapping[str, str],
        body: bytes | None,
        deadline: float,
        max_bytes: int,
    ) -> Answer:
        """Send one request to ``url`` and read the answer, at most ``max_bytes`` of it.

        Raises ``TooLarge`` past the cap and ToolErrors (``E_HTTP_*``) for refusals and
        network failures. Messages name host and port, never the path (it may hold a token).
        """
        config = self.config
        addresses = vet_addresses(
            url, allow_private=config.allow_private_networks, allowed_hosts=config.allowed_hosts
        )
        sent = {"user-agent": USER_AGENT, **headers}
        with network_errors(url):
            conn = PinnedConnection(
                url.host,
                url.port,
                addresses=addresses,
                tls=self._tls if url.scheme == "https" else None,
                timeout=remaining(deadline),
            )
            try:
                conn.connect()
                sock = conn.sock
                try:
                    conn.request(method, url.target, body=body, headers=sent)
                except ValueError:
                    # http.client quotes the offending value, which may be the token.
                    raise ToolError(
                        f"[{config.tool}] a request header or path is not valid",
                        code=ToolCode.E_HTTP_INVALID_HEADER,
                    ) from None
                sock.settimeout(remaining(deadline))
                response = conn.getresponse()
                return self._read(sock, response, max_bytes, deadline)
            finally:
                conn.close()

    def post_api(
        self,
        url: Url,
        headers: Mapping[str, str],
        body: bytes,
        deadline: float,
        method: str,
        suggestion: str | None = None,
    ) -> Answer:
        """POST ``body`` to the API ``method`` at ``url``: its answer, within
        :data:`MAX_API_ANSWER_BYTES` (past it, a ``BAD_RESPONSE`` error naming ``method``)."""
        try:
            return self.exchange(
                "POST",
                url,
                headers=headers,
                body=body,
                deadline=deadline,
                max_bytes=MAX_API_ANSWER_BYTES,
            )
        except TooLarge:
            raise ToolError(
                f"[{self.config.tool}] {method}: the answer is over {MAX_API_ANSWER_BYTES} bytes",
                code=BAD_RESPONSE,
                suggestion=suggestion,
            ) from None

    def fetch_file(
        self, url: Url, headers: Mapping[str, str], deadline: float, options: DownloadOptions
    ) -> Answer:
        """GET a file within ``options.max_bytes`` (past it, ``E_CHAT_FILE_TOO_LARGE``)."""
        try:
            return self.exchange(
                "GET",
                url,
                headers=headers,
                body=None,
                deadline=deadline,
                max_bytes=options.max_bytes,
            )
        except TooLarge as exc:
            raise too_large_error(self.config.tool, "the file", exc, options.max_bytes) from None

    def with_token(self, env_names: tuple[str, ...], fn: Callable[[str], T]) -> T:
        """``fn`` of the bot token (the config's, else the first of ``env_names`` set), with
        the token masked in whatever escapes it (:func:`call_safely`)."""
        tool = self.config.tool
        token = resolve_token(tool, self.config.token, env_names)
        return call_safely(tool, token, lambda: fn(token))

    @staticmethod
    def _read(
        sock: socket.socket, response: http.client.HTTPResponse, max_bytes: int, deadline: float
    ) -> Answer:
        headers = {k.lower(): v for k, v in response.getheaders()}
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            raise TooLarge(int(length), announced=True)
        chunks: list[bytes] = []
        got = 0
        while True:
            sock.settimeout(remaining(deadline))
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:
                raise TooLarge(got, announced=False)
        return Answer(status=response.status, headers=headers, body=b"".join(chunks))


def json_body(answer: Answer) -> JsonObject | None:
    """The answer's body as a JSON object, or ``None`` when it is not one."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def not_api_json(tool: str, method: str, status: int, api: str) -> ToolError:
    """The error of an answer to ``method`` that is not JSON of the ``api`` (``Web API``)."""
    return ToolError(
        f"[{tool}] {method}: HTTP {status} with an answer that is not {api} JSON",
        code=BAD_RESPONSE,
        suggestion="Check the Tool config apiBaseUrl; retry later.",
    )


def retry_suggestion(wait: object) -> str:
    """What a rate-limited call's error suggests: the wait the API named, when it named one."""
    if wait is None:
        return "Wait a few seconds, then call again; the call is safe to retry."
    return f"Wait {wait} seconds, then call again; the call is safe to retry."


def too_large_error(tool: str, what: str, exc: TooLarge, max_bytes: int) -> ToolError:
    """``E_CHAT_FILE_TOO_LARGE`` for a download over ``max_bytes``."""
    size = f"{exc.size} bytes" if exc.announced else f"more than {max_bytes} bytes"
    return ToolError(
        f"[{tool}] {what} is {size}; the limit of this call is {max_bytes} bytes",
        code=FILE_TOO_LARGE,
        suggestion=(
            f"Raise maxBytes (at most {MAX_DOWNLOAD_BYTES}) if the file is needed, or skip it."
        ),
    )


# -- the downloaded file ---------------------------------------------------------------------


def file_result(
    ctx: ToolContext,
    data: bytes,
    *,
    name: str | None,
    content_type: str | None,
    options: DownloadOptions,
) -> JsonObject:
    """``{size, mimeType, base64?, dataUrl?, savedPath?}`` for downloaded ``data``."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if not mime or mime in ("application/octet-stream", "binary/octet-stream"):
        guessed = mimetypes.guess_type(name or "")[0]
        mime = guessed or mime or "application/octet-stream"
    out: JsonObject = {"size": len(data), "mimeType": mime}
    encoded = base64.b64encode(data).decode("ascii")
    if options.include_base64:
        out["base64"] = encoded
    if options.include_data_url:
        out["dataUrl"] = f"data:{mime};base64,{encoded}"
    if options.save_path is not None:
        out["savedPath"] = save_file(ctx, options.save_path, data)
    return out


def downloaded(
    ctx: ToolContext,
    answer: Answer,
    fields: JsonObject,
    *,
    name: str,
    content_type: str | None,
    options: DownloadOptions,
) -> JsonObject:
    """A download export's result: ``ok``, the export's own ``fields``, and the file
    (:func:`file_result`)."""
    out: JsonObject = {"ok": True, **fields}
    out.update(file_result(ctx, answer.body, name=name, content_type=content_type, options=options))
    return out


def check_save_path(ctx: ToolContext, path: str | None) -> None:
    """Refuse a ``savePath`` outside the workdir before anything is downloaded."""
    if path is not None:
        _workspace(ctx).resolve(path)


def _workspace(ctx: ToolContext) -> Workspace:
    return Workspace(ctx.workdir, allow_outside=False, code=OUTSIDE_WORKDIR)


def save_file(ctx: ToolContext, path: str, data: bytes) -> str:
    """Write ``data`` to ``path`` inside the workdir (parents created); its workdir path."""
    with pinned_workspace(ctx, allow_outside=False, code=OUTSIDE_WORKDIR) as ws:
        return _save(ws, path, data)


def _save(ws: Workspace, path: str, data: bytes) -> str:
    target = ws.resolve(path)
    if not target.parts:
        raise invalid_arg("'savePath' names the workdir itself; give a file name")
    try:
        parent = ws.open_dir(target.base, target.parent_parts, create=True)
        try:
            # No O_TRUNC: the file is emptied only once its descriptor passed the checks.
            fd, _ = ws.open_file(parent, target, os.O_WRONLY | os.O_CREAT)
        finally:
            os.close(parent)
        try:
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads (the open does not wait for one)
            raise ToolError(
                f"not a regular file: {target.display!r}", code=ToolCode.E_FS_NOT_A_FILE
            ) from None
        reason = exc.strerror or str(exc)
        if exc.errno == errno.ELOOP:
            reason = "it is a symlink"
        raise ToolError(
            f"cannot write {target.display!r}: {reason}", code=ToolCode.E_FS_IO
        ) from None
    return target.display


def call_safely(tool: str, secret: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; whatever escapes becomes a ToolError with ``secret`` masked and no chain.

    The original exception is neither the cause nor the context of the one raised: a lower
    exception may quote a URL or header holding the token, and the runtime logs chains.
    """
    try:
        return fn()
    except ToolError as exc:
        clean = ToolError(
            redact(exc.message, secret),
            code=exc.code,
            suggestion=None if exc.suggestion is None else redact(exc.suggestion, secret),
            help_url=exc.help_url,
            name=exc.name,
        )
    except Exception as exc:
        message = redact(f"[{tool}] {type(exc).__name__}: {exc}", secret)
        clean = ToolError(message, code=ToolCode.E_TOOL, name=type(exc).__name__)
    # Raised outside the except clauses, so Python attaches no __context__.
    raise clean
