"""``goondan mcp``: the running daemon's MCP server over stdio, for clients that start their
servers themselves (Claude Desktop, editors).

It speaks MCP on its stdin and stdout and forwards every request to the daemon's ``/mcp``
(over ``api.sock`` by default, or the ``--api-url`` listener with the token of
``--api-token-env``), so the tools, answers, progress and approvals are the daemon's own: the
tools are the agents the ``mcp`` door shows, a parked approval is asked through the client's
elicitation when it declared it, and a call waits otherwise. The daemon sees this process as
the caller (it decides approvals only if this process is no agent's). Nothing but MCP is
written to stdout; what goes wrong is said on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from goondan.errors import ExitCode
from orchestrator.cli.common import fail, state_dir_of

if TYPE_CHECKING:
    import httpx2
    import mcp_types as types
    from mcp import ClientSession
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

    from orchestrator.http.client import DaemonApi

CONNECT_SECONDS = 30.0
"""How long reaching the daemon may take."""
READ_SECONDS = 300.0
"""How long the daemon's stream may stay silent (a call in flight reports progress at least
every 15 s, as the bridge always asks for it)."""
_PROGRESS_KEYS = frozenset({"progressToken", "progress_token"})
"""The ``_meta`` keys of a call's progress token (the bridge sends its own)."""
DESCRIPTION = (
    "Speak MCP on stdin and stdout, forwarding every request to the /mcp of the daemon "
    "serving BUNDLE's state directory (over its api.sock), or of the daemon at --api-url "
    "(with the token held by the variable --api-token-env names). Each agent the daemon "
    "shows to MCP is a tool taking {input, instanceKey?}. Start the daemon first (run)."
)
"""What ``goondan mcp --help`` says it does."""


def add_mcp_arguments(sub: argparse.ArgumentParser) -> None:
    """The description of ``mcp`` and its bundle argument (the parser adds the state and
    daemon options after them)."""
    sub.description = DESCRIPTION
    sub.add_argument(
        "file",
        nargs="?",
        metavar="BUNDLE",
        help="goondan.yaml or a bundle directory: locates the state (default: goondan.yaml here)",
    )
    sub.add_argument("-c", "--config", metavar="FILE", help="the same, as an option")


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve MCP on stdio until the client closes stdin; forward everything to the daemon."""
    from orchestrator.cli.api_target import TargetError, daemon_api
    from orchestrator.http.mcp_server import MCP_EXTRA_MISSING, mcp_available

    if not mcp_available():
        return fail(args, ExitCode.CONFIG, MCP_EXTRA_MISSING)
    try:
        api = daemon_api(args, lambda: state_dir_of(args))
    except TargetError as exc:
        return fail(args, exc.exit_code, str(exc))
    import anyio

    try:
        return anyio.run(_serve, api)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the daemon's ``/mcp`` answers, and how to reach it."""

    url: str
    where: str
    socket: str | None
    headers: dict[str, str]

    @classmethod
    def of(cls, api: DaemonApi) -> Upstream:
        """The ``/mcp`` of the daemon ``api`` names."""
        headers = {"Authorization": f"Bearer {api.token}"} if api.token else {}
        if api.url is not None:
            return cls(f"{api.url}/mcp", api.where, None, headers)
        return cls("http://localhost/mcp", api.where, str(api.path), headers)

    def client(self) -> httpx2.AsyncClient:
        """An HTTP client of the daemon (over its Unix socket when it has one)."""
        import httpx2

        transport = httpx2.AsyncHTTPTransport(uds=self.socket) if self.socket else None
        timeout = httpx2.Timeout(CONNECT_SECONDS, read=READ_SECONDS)
        return httpx2.AsyncClient(transport=transport, headers=self.headers, timeout=timeout)


async def _serve(api: DaemonApi) -> int:
    upstream = Upstream.of(api)
    refused = await _probe(upstream)
    if refused is not None:
        message, code = refused
        print(f"error: {message}", file=sys.stderr)
        return int(code)
    await Bridge(upstream).run()
    return int(ExitCode.OK)


async def _probe(upstream: Upstream) -> tuple[str, ExitCode] | None:
    """Why the daemon cannot be used (no daemon, a token refused), or ``None``."""
    import httpx2

    async with upstream.client() as http:
        try:
            answer = await http.get(upstream.url.removesuffix("/mcp") + "/healthz")
        except httpx2.HTTPError as exc:
            return f"no daemon answers at {upstream.where}: {exc}", ExitCode.NETWORK
    if answer.status_code == 401:
        hint = "pass --api-token-env NAME" if "Authorization" not in upstream.headers else ""
        return f"the daemon at {upstream.where} refused the token {hint}".strip(), ExitCode.AUTH
    if answer.status_code >= 400:
        return f"the daemon at {upstream.where} answered {answer.status_code}", ExitCode.NETWORK
    return None


class Bridge:
    """An MCP server on stdio whose every request is asked of the daemon's ``/mcp``.

    The daemon's session is opened once the client has said what it can (its first request
    after ``initialize``), so the bridge declares elicitation to the daemon only when the
    client declared it, and holds it until stdin closes.
    """

    def __init__(self, upstream: Upstream) -> None:
        import anyio

        self.upstream = upstream
        self.client: ServerSession | None = None
        """The stdio client's session (for what the daemon asks of it)."""
        self._wanted = anyio.Event()
        self._ready = anyio.Event()
        self._session: ClientSession | None = None
        self._failure: str | None = None
        self._elicits = False

    async def run(self) -> None:
        """Serve stdio until the client closes it."""
        import anyio
        from mcp.server.lowlevel.server import Server
        from mcp.server.stdio import stdio_server

        server: Server[Any] = Server(
            "goondan", on_list_tools=self.list_tools, on_call_tool=self.call_tool
        )
        async with stdio_server() as (read, write), anyio.create_task_group() as group:
            group.start_soon(self._hold)
            await server.run(read, write, server.create_initialization_options())
            group.cancel_scope.cancel()

    async def _hold(self) -> None:
        """Open the daemon's session when first needed; hold it until cancelled."""
        import anyio

        await self._wanted.wait()
        try:
            async with self._daemon_session() as session:
                self._session = session
                self._ready.set()
                await anyio.sleep_forever()
        except Exception as exc:
            self._failure = f"the daemon at {self.upstream.where} could not be reached: {exc}"
            self._ready.set()

    @contextlib.asynccontextmanager
    async def _daemon_session(self) -> AsyncIterator[ClientSession]:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        callback = self._elicit if self._elicits else None
        async with (
            self.upstream.client() as http,
            streamable_http_client(self.upstream.url, http_client=http) as (read, write),
            ClientSession(
                read, write, elicitation_callback=callback, logging_callback=self._log
            ) as session,
        ):
            await session.initialize()
            yield session

    async def _daemon(self, ctx: ServerRequestContext[Any, Any]) -> ClientSession:
        """The daemon's session (opened now, knowing what the client can)."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        self.client = ctx.session
        if not self._wanted.is_set():
            wants = types.ClientCapabilities(elicitation=types.ElicitationCapability())
            self._elicits = ctx.session.check_client_capability(wants)
            self._wanted.set()
        await self._ready.wait()
        if self._session is None:
            raise MCPError(types.INTERNAL_ERROR, self._failure or "no daemon")
        return self._session

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The daemon's tools."""
        import mcp_types as types

        listed = await (await self._daemon(ctx)).list_tools(params=params)
        return types.ListToolsResult(tools=listed.tools, next_cursor=listed.next_cursor)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """The daemon's answer to the call, its progress relayed as it comes."""

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        session = await self._daemon(ctx)
        # The call's own _meta goes on (its idempotency key), but for its progress token:
        # the daemon reports to the bridge's, which passes it on under the client's.
        kept = {k: v for k, v in (ctx.meta or {}).items() if k not in _PROGRESS_KEYS}
        meta = cast("types.RequestParamsMeta", kept) if kept else None
        return await session.call_tool(
            params.name, params.arguments, progress_callback=progressed, meta=meta
        )

    async def _elicit(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """Ask the stdio client what the daemon asks (an approval)."""
        import mcp_types as types

        if self.client is None or not isinstance(params, types.ElicitRequestFormParams):
            return types.ErrorData(code=types.INVALID_REQUEST, message="nobody to ask")
        return await self.client.elicit_form(params.message, params.requested_schema)

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Pass the daemon's log message on (what a waiting call waits for)."""
        import mcp_types as types
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if self.client is None or self.client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        await self.client.send_notification(types.LoggingMessageNotification(params=params))
