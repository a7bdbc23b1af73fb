"""``mcp``: the tools of MCP servers as tools of the agent, on the official ``mcp`` SDK.

At boot, each configured server is started (a stdio command, or a streamable-HTTP URL) and
its tools are listed. Each becomes the tool ``{extension}__{tool}`` (the MCP name with
characters outside ``[A-Za-z0-9_-]`` replaced by ``_``), with the server's input schema as its
parameters and ``source: {type: mcp, name: <extension>, mcp: {extensionName, serverName}}``.
Calls go through the agent's ``toolCall`` middleware, catalog and argument checks like any
other tool.

Failures are tool results, never a crashed agent:

- ``E_MCP_TOOL_ERROR``: the server ran the tool and reported an error;
- ``E_MCP_TIMEOUT``: no answer within ``callTimeoutSeconds``;
- ``E_MCP_SERVER_UNAVAILABLE``: the server is not running, died, or closed the connection.
  The next call starts it again;
- ``E_MCP_ERROR``: the server refused the request (unknown tool, bad parameters, ...).

A server that cannot start at boot is logged and does not stop the agent; it is retried in the
background before a later Step (at most every ``retrySeconds``), and its tools appear once it
is up. Servers are stopped with the agent process; a stdio server also ends when its stdin
closes, so none outlives a killed agent.

Config:

- ``servers``: a list of
  ``{name, command, args: [], env: {}, cwd, sandbox}`` (stdio) or ``{name, url}`` (streamable
  HTTP), each optionally with ``tools`` (only these MCP tools), ``startupTimeoutSeconds`` (20)
  and ``callTimeoutSeconds`` (60).
- ``retrySeconds`` (10): the least time between two start attempts of a failed server.

Stdio servers run in the tool sandbox (:mod:`tools_base.sandbox`, the same as ``bash``'s
commands): their own user, PID, mount, IPC and UTS namespaces, limits, and a view of the
machine made of

- the system's directories (``/usr``, ``/bin``, ``/lib*``, ``/etc``…), read-only;
- the server's **program**, read-only: the executable ``command`` resolves to on the server's
  ``PATH``, and the installation it belongs to when it lies in one's ``bin`` (a Python venv
  and the interpreter it was made from, a Python or Node.js installation such as a pyenv, uv
  or nvm one, never a whole home directory), the same for a script's ``#!`` interpreter, and
  ``uv`` beside ``uvx``; so ``python server.py``, a venv's console script, ``npx`` and ``uvx``
  work as configured;
- every argument that is an **absolute path to an existing file** (a server script),
  read-only;
- ``cwd``, read-only, where the server starts;
- a **directory of its own**, read-write, which is its ``HOME`` (``npx``'s and ``uvx``'s
  caches go there) and its working directory when no ``cwd`` is given. One server serves
  every conversation instance of the agent, so no instance's workspace is its; the directory
  lives under the system's temporary directory and goes when the agent stops the server;
- a private ``/tmp`` and ``/proc``, and the paths of ``sandbox.readOnlyPaths`` and
  ``sandbox.readWritePaths``.

Nothing else has a name inside: not the agent's state directory or ``api.sock``, not the
users' homes (so not ``~/.npmrc``, ``~/.cache`` or a user's site-packages), not a directory
named in ``args`` (a file server's root: list it in ``sandbox.readWritePaths`` or
``readOnlyPaths``), not paths that ``.pth`` files of a venv add (an editable install's
source: ``readOnlyPaths``). A server must be given what it reads in ``env`` or those paths.

``sandbox`` (stdio servers only) is ``false`` to run the server unconfined, as the agent's
user with its view of the machine (a server that drives Docker, say), or an object:
``network`` (**on** for MCP servers: they are the operator's choice, not a model's, and
most need it; on means public addresses only, through a proxy the agent runs for as long as
the server does, each connection recorded on the span of the call it happened in; an object
``{allow, deny, hosts}`` narrows it; off gives it no network at all, not even loopback),
``memoryMiB`` (4096, the address space of each process), ``processes`` (256),
``fileSizeMiB`` (1024), ``tmpMiB`` (256, ``/dev/shm`` included), ``diskMiB`` (1024: its own
directory's disk quota; past it the server is stopped, and started again by the next call),
``cpuSeconds`` (none: a long-lived server would use up any bound), ``readOnlyPaths``
and ``readWritePaths`` (absolute paths). Where no sandbox can be made, a sandboxed server
does not start (logged and retried like any server that cannot start; its calls fail with
``E_MCP_SERVER_UNAVAILABLE`` and the reason), unless the Swarm's ``policy.sandbox`` is
``off``.

Needs the SDK: ``pip install 'goondan-py[mcp]'``. Example::

    extensions:
      - ref: { kind: Extension, name: mcp, package: "@goondan/base" }
        config:
          servers:
            - name: files
              command: npx
              args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
              sandbox: { readWritePaths: [/srv/data] }   # a directory it serves is not shown
            - name: search
              url: http://127.0.0.1:8931/mcp
              tools: [web_search]
            - name: notes
              command: /opt/notes-mcp/.venv/bin/python
              args: [/opt/notes-mcp/server.py]
              env: { NOTES_DIR: /srv/notes }
              sandbox: { network: false, readWritePaths: [/srv/notes] }
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from goondan.errors import ToolCode
from tools_base import (
    ExtensionApi,
    ExtensionError,
    JsonValue,
    ToolContext,
    ToolError,
    sandbox,
)
from tools_base.extensions import _mcp_sandbox
from tools_base.extensions._mcp_config import ServerSpec, parse_servers
from tools_base.sandbox import SandboxPolicy
from tools_base.sandbox._quota import Guard

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
STOP_TIMEOUT_SECONDS = 3.0


def tool_name_for(extension: str, mcp_name: str) -> str | None:
    """``{extension}__{tool}`` with the tool part made safe, or ``None`` if nothing is left."""
    part = _UNSAFE.sub("_", mcp_name)
    while "__" in part:
        part = part.replace("__", "_")
    part = part.strip("_")
    return f"{extension}__{part}" if part else None


@dataclass(eq=False)
class McpServer:
    """One server: a task that owns the SDK client for as long as the connection lives."""

    spec: ServerSpec
    logger: Any
    _client: Any = None
    _owner: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tools: list[Any] = field(default_factory=list)
    """The server's MCP ``Tool`` descriptions from the last successful start."""
    last_attempt: float = 0.0
    directory: str | None = None
    """The sandboxed server's own directory (its ``HOME``), kept across its restarts."""
    backend: str = "none"
    """The sandbox the server runs in (``bwrap``, ``namespaces``, ``off``), or ``none``."""
    call_sinks: list[sandbox.ConnectionSink] = field(default_factory=list)
    """Where the calls running now record connections (the newest call gets each)."""

    @property
    def running(self) -> bool:
        """Connected, as far as we know (a server told to stop, by its quota say, is not: its
        connection may outlive its process for a moment, and a call must not be sent there)."""
        return (
            self._client is not None
            and self._owner is not None
            and not self._owner.done()
            and not self._stop.is_set()
        )

    async def ensure_running(self) -> Any:
        """The connected client, starting the server first if needed."""
        async with self._lock:
            if self.running:
                return self._client
            await self._shutdown()
            self.last_attempt = time.monotonic()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._owner = asyncio.ensure_future(self._own(ready))
            try:
                async with asyncio.timeout(self.spec.startup_timeout):
                    self._client = await asyncio.shield(ready)
            except BaseException:
                await self._shutdown()
                raise
            self.logger.info(
                "mcp server started",
                server=self.spec.name,
                tools=len(self.tools),
                sandbox=self.backend,
            )
            return self._client

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client, StdioServerParameters

        target: Any = self.spec.url
        launch: sandbox.Launch | None = None
        proxy: sandbox.NetworkProxy | None = None
        guard: Guard | None = None
        try:
            if self.spec.url is None:
                assert self.spec.command is not None
                if self.spec.sandbox is None:
                    target = StdioServerParameters(
                        command=self.spec.command,
                        args=list(self.spec.args),
                        env=dict(self.spec.env) if self.spec.env is not None else None,
                        cwd=self.spec.cwd,
                    )
                else:
                    proxy = await _mcp_sandbox.start_proxy(
                        self.spec.sandbox, self.spec.name, self.call_sinks
                    )
                    launch = await self._prepare(self.spec.sandbox, proxy)
                    if proxy is not None and launch.backend is sandbox.SandboxMode.OFF:
                        await proxy.close()  # policy.sandbox off: the host's own network
                    # Its own directory is on the agent's disk: bounded like a workspace.
                    assert self.directory is not None
                    guard = Guard(self.directory, self.spec.sandbox.limits.disk_mib)
                    await guard.before()
                    target = StdioServerParameters(
                        command=launch.launcher_argv[0],
                        args=launch.launcher_argv[1:],
                        env=launch.env,
                        cwd=self._cwd(),
                    )
            async with Client(target) as client, self._watching(guard):
                tools: list[Any] = []
                cursor: str | None = None
                while True:
                    listed = await client.list_tools(cursor=cursor)
                    tools.extend(listed.tools)
                    cursor = listed.next_cursor
                    if not cursor:
                        break
                self.tools = tools
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(exc))
            if not isinstance(exc, asyncio.CancelledError | Exception):
                raise
            if not self._stop.is_set():
                self.logger.warning(
                    "mcp server connection ended", server=self.spec.name, error=repr(exc)
                )
        finally:
            self._client = None
            if launch is not None:
                launch.close()
            if proxy is not None:
                await proxy.close()

    def _watching(self, guard: Guard | None) -> contextlib.AbstractAsyncContextManager[None]:
        """While the server runs: past its disk quota, it is stopped (the next call starts it
        again, and it may then only shrink its directory)."""

        async def over() -> None:
            why = guard.exceeded if guard is not None else None
            self.logger.warning("mcp server stopped", server=self.spec.name, why=why)
            self._stop.set()

        return _mcp_sandbox.watching_quota(guard, over)

    def _cwd(self) -> str:
        """Where the server starts: ``cwd`` (relative to the agent's, as unsandboxed), else its
        own directory."""
        if self.spec.cwd is None:
            assert self.directory is not None
            return self.directory
        return os.path.realpath(self.spec.cwd)

    async def _prepare(
        self, policy: SandboxPolicy, proxy: sandbox.NetworkProxy | None
    ) -> sandbox.Launch:
        """The server's program made ready to start in the sandbox, off the loop."""
        from mcp.client.stdio import get_default_environment

        env = get_default_environment() | dict(self.spec.env or {})
        handoff = proxy.handoff if proxy is not None else None
        return await _mcp_sandbox.launch_off_loop(lambda: self._launch(policy, env, handoff))

    def _launch(
        self, policy: SandboxPolicy, env: dict[str, str], handoff: str | None
    ) -> sandbox.Launch:
        assert self.spec.command is not None
        if self.directory is None:
            self.directory = _mcp_sandbox.make_directory()
        cwd = self._cwd()
        if not os.path.isdir(cwd):
            raise FileNotFoundError(f"cwd {self.spec.cwd!r} is not a directory")
        program = _mcp_sandbox.find_program(
            self.spec.command, self.spec.args, search_path=_mcp_sandbox.path_of(env), cwd=cwd
        )
        shown = (*program.read_only, *([cwd] if self.spec.cwd is not None else []))
        launch = sandbox.prepare(
            [program.executable, *self.spec.args],
            env=env,
            cwd=cwd,
            workdir=self.directory,
            policy=replace(policy, read_only=(*shown, *policy.read_only)),
            proxy=handoff,
        )
        self.backend = str(launch.backend)
        return launch

    async def call(self, name: str, args: dict[str, Any]) -> JsonValue:
        """Call the MCP tool ``name``; every failure is a :class:`ToolError`."""
        # The server's connections while this call runs are recorded on its span.
        with _mcp_sandbox.recording_on(self.call_sinks, sandbox.connection_sink.get()):
            return await self._call(name, args)

    async def _call(self, name: str, args: dict[str, Any]) -> JsonValue:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        server = self.spec.name
        try:
            client = await self.ensure_running()
        except Exception as exc:
            raise ToolError(
                f"MCP server {server!r} is not available: {_describe(exc)}",
                code=ToolCode.E_MCP_SERVER_UNAVAILABLE,
                suggestion="Retry later; the server is started again on the next call.",
            ) from None
        try:
            async with asyncio.timeout(self.spec.call_timeout):
                result = await client.call_tool(name, args)
        except TimeoutError:
            raise ToolError(
                f"MCP tool {name!r} of {server!r} gave no answer within {self.spec.call_timeout:g} s",
                code=ToolCode.E_MCP_TIMEOUT,
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                await self.mark_dead()
                what = f"MCP server {server!r} closed the connection during {name!r}"
                raise _lost(what) from None
            raise ToolError(
                f"MCP server {server!r} refused {name!r}: {exc.message}", code=ToolCode.E_MCP_ERROR
            ) from None
        except Exception as exc:
            await self.mark_dead()
            raise _lost(f"MCP server {server!r} failed during {name!r}: {_describe(exc)}") from None
        text = "\n".join(
            block.text if getattr(block, "type", None) == "text" else f"[{block.type}]"
            for block in result.content
        )
        if result.is_error:
            raise ToolError(text or f"MCP tool {name!r} failed", code=ToolCode.E_MCP_TOOL_ERROR)
        if result.structured_content is not None:
            structured: JsonValue = result.structured_content
            return structured
        return text

    async def mark_dead(self) -> None:
        """Forget the connection; the next call starts the server again."""
        async with self._lock:
            await self._shutdown()

    async def _shutdown(self) -> None:
        owner, self._owner = self._owner, None
        self._client = None
        if owner is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                await asyncio.shield(owner)
        except (TimeoutError, Exception):
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)

    async def stop(self) -> None:
        """Close the connection (a stdio server process is terminated) and remove the
        server's own directory."""
        async with self._lock:
            await self._shutdown()
            directory, self.directory = self.directory, None
            if directory is not None:
                await asyncio.to_thread(_mcp_sandbox.remove_directory, directory)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "it did not start in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def register(api: ExtensionApi) -> None:
    """Start the servers and register their tools; a server that fails is retried later."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ExtensionError(
            "the MCP bridge needs the mcp SDK: pip install 'goondan-py[mcp]'"
        ) from exc
    specs = parse_servers(api.config)
    retry = api.config.get("retrySeconds", 10)
    if isinstance(retry, bool) or not isinstance(retry, int | float) or retry <= 0:
        raise ExtensionError("config.retrySeconds must be a positive number")
    servers = [McpServer(spec, api.logger) for spec in specs]
    registered: dict[str, set[str]] = {}
    """server name → the tool names registered for it."""
    pending: set[asyncio.Task[Any]] = set()

    def register_tools(server: McpServer) -> None:
        for tool in server.tools:
            if server.spec.tools is not None and tool.name not in server.spec.tools:
                continue
            name = tool_name_for(api.name, tool.name)
            if name is not None and name in registered.get(server.spec.name, set()):
                continue
            if name is None or api.tools.has(name):
                api.logger.warning(
                    "mcp tool skipped: its name is taken or unusable",
                    server=server.spec.name,
                    tool=tool.name,
                )
                continue
            api.tools.register(
                {
                    "name": name,
                    "description": tool.description,
                    "parameters": tool.input_schema or {"type": "object", "properties": {}},
                    "source": {
                        "type": "mcp",
                        "name": api.name,
                        "mcp": {"extensionName": api.name, "serverName": server.spec.name},
                    },
                },
                _handler(server, tool.name),
                timeout_seconds=server.spec.startup_timeout + server.spec.call_timeout + 5,
            )
            registered.setdefault(server.spec.name, set()).add(name)

    async def start(server: McpServer) -> bool:
        try:
            await server.ensure_running()
        except Exception as exc:
            api.logger.error(
                "mcp server did not start; retrying later",
                server=server.spec.name,
                error=_describe(exc),
            )
            return False
        register_tools(server)
        return True

    for server in servers:
        await start(server)

    async def retry_failed(ctx: Any) -> Any:
        now = time.monotonic()
        for server in servers:
            unlisted = server.spec.name not in registered
            if unlisted and not server.running and now - server.last_attempt >= retry:
                server.last_attempt = now
                task = asyncio.ensure_future(start(server))
                pending.add(task)
                task.add_done_callback(pending.discard)
        return await ctx.next()

    async def stop() -> None:
        for task in list(pending):
            task.cancel()
        await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)

    if servers:
        api.pipeline.register("step", retry_failed)
        api.on_stop(stop)


def _handler(server: McpServer, mcp_name: str) -> Any:
    async def call(ctx: ToolContext, args: dict[str, Any]) -> JsonValue:
        return await server.call(mcp_name, dict(args))

    return call


def _lost(message: str) -> ToolError:
    """The error of a call whose server died under it (marked dead: the next call starts it)."""
    return ToolError(message, code=ToolCode.E_MCP_SERVER_UNAVAILABLE, suggestion=_RESTARTS)


_RESTARTS = "Retry: the server is started again on the next call."
