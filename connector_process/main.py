"""Run one Connection's connector: import it, give it a context, relay what it emits.

Boot: the connector module is imported, its ``run`` looked up and the Connection's config and
secrets resolved; any failure there is reported as ``boot_failed`` (exit
:data:`~ipc.protocol.EXIT_BOOT_FAILURE`) so ``status`` names it and the supervisor backs off.
Then ``ready``, and ``run(ctx)`` runs until:

- a ``shutdown`` arrives (or SIGTERM): ``run`` is cancelled, the process exits 0;
- ``run`` returns: the source is exhausted; the process waits until its events in flight are
  settled, then exits 0 (the Orchestrator then stops the swarm, as the ``cli`` connector at end
  of input wants);
- ``run`` raises: logged, exit 1, a crash the supervisor restarts with backoff;
- the pipe to the Orchestrator closes: the process exits (no orphan connector).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import structlog

from bundle.entry import load_entry_module
from bundle.plan import ConnectionPlan
from bundle.secrets import resolve_value
from goondan.proctitle import name_process
from ipc import Channel, EventMessage, IpcMessage, ShutdownMessage
from ipc import protocol as wire
from ipc.logs import configure_logging, log_writer
from ipc.protocol import EXIT_BOOT_FAILURE, ORCHESTRATOR, EventKind
from ipc.scope import SCOPE_ENV, new_scope
from connector_process.answers import AnswerWaiters
from tools_base import ConnectorEvent, TurnAnswer
from tools_base._connector import lookup_setting

EXIT_CRASHED = 1
CONNECTIONS_DIR = "connections"
"""Under the state directory, a directory per Connection for its connector's own state."""


def serve(conn: Connection, plan_data: dict[str, Any]) -> None:
    """Process entry point (the target the Orchestrator starts)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the Orchestrator's to act on
    plan = ConnectionPlan.model_validate(plan_data)
    name_process("connector", plan.connection_name)
    os.umask(0o077)
    os.environ[SCOPE_ENV] = new_scope()
    configure_logging(process=f"connector:{plan.connection_name}")
    if plan.stdin_path is not None:
        _take_stdin(plan.stdin_path)
    loop: asyncio.AbstractEventLoop
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    # Not asyncio.run: its teardown joins the default executor's threads, and a connector may
    # leave one blocked for good (a read of stdin). The process ends here whatever they do.
    code = loop.run_until_complete(_main(conn, plan))
    sys.stdout.flush()
    log_writer().drain()
    os._exit(code)


def _take_stdin(path: str) -> None:
    """Make ``path`` (the daemon's standard input) this process's fd 0 and ``sys.stdin``:
    multiprocessing gives a child ``/dev/null`` instead."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:  # no input to read: the connector sees end of input
        structlog.get_logger("goondan.connector").warning(
            "standard input not available", path=path, error=str(exc)
        )
        return
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (lives as long as the process)


async def _main(conn: Connection, plan: ConnectionPlan) -> int:
    host = ConnectorHost(plan)
    host.channel = await Channel.open(
        conn, ORCHESTRATOR, on_message=host.on_message, on_close=host.stop
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, host.stop)
    return await host.run()


class ConnectorHost:
    """Everything the process of one Connection runs."""

    channel: Channel
    """Set once the pipe is open (see :func:`_main`)."""

    def __init__(self, plan: ConnectionPlan) -> None:
        self.plan = plan
        self.name = plan.connection_name
        self.log = structlog.get_logger("goondan.connector").bind(
            connection=self.name, connector=plan.connector_name, pid=os.getpid()
        )
        self._in_flight = asyncio.Semaphore(plan.max_events_in_flight)
        self._unsettled: set[str] = set()
        self._all_settled = asyncio.Event()
        self._all_settled.set()
        self.answers = AnswerWaiters()
        self._stopping = asyncio.Event()
        self._counter = 0

    # -- messages from the Orchestrator ----------------------------------------------------

    def on_message(self, message: IpcMessage) -> None:
        if isinstance(message, ShutdownMessage):
            self.stop()
        elif (
            isinstance(message, EventMessage) and message.kind == EventKind.CONNECTOR_EVENT_SETTLED
        ):
            try:
                body = wire.read_event(message)
            except Exception as exc:
                self.log.warning("event refused", kind=message.kind, error=str(exc))
                return
            assert isinstance(body, wire.ConnectorEventSettled)
            self._settled(body)

    def _settled(self, body: wire.ConnectorEventSettled) -> None:
        if body.event_id not in self._unsettled:
            return
        self._unsettled.discard(body.event_id)
        self.answers.settle(body)
        self._in_flight.release()
        if body.error is not None:
            self.log.warning("event not handled", event_id=body.event_id, error=body.error)
        if not self._unsettled:
            self._all_settled.set()

    def stop(self) -> None:
        """Stop: cancel ``run`` (a shutdown, SIGTERM, or the Orchestrator gone)."""
        self._stopping.set()

    # -- running the connector ---------------------------------------------------------------

    async def run(self) -> int:
        """Boot, report ready, run the connector; returns the exit code."""
        try:
            entry, context = self._boot()
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            self.log.error("connector cannot start", error=message)
            self._tell(wire.BootFailed(message))
            await self.channel.flush()
            return EXIT_BOOT_FAILURE
        self._tell(wire.Ready(os.getpid(), os.environ.get(SCOPE_ENV)))
        self.log.info("connector started")
        running = asyncio.ensure_future(entry(context))
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not running.done():  # asked to stop
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
            self.log.info("connector stopped")
            return 0
        stopping.cancel()
        error = running.exception()
        if error is not None:
            self.log.error(
                "connector failed", error=f"{type(error).__name__}: {error}", exc_info=error
            )
            return EXIT_CRASHED
        # The source is exhausted: finish what is in flight (or stop when asked to).
        self.log.info("connector finished; waiting for its events", in_flight=len(self._unsettled))
        settled = asyncio.ensure_future(self._all_settled.wait())
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({settled, stopping}, return_when=asyncio.FIRST_COMPLETED)
        settled.cancel()
        stopping.cancel()
        return 0

    def _boot(self) -> tuple[Callable[[Any], Awaitable[None]], RuntimeConnectorContext]:
        module = load_entry_module(Path(self.plan.entry_path))
        entry = getattr(module, "run", None)
        if entry is None or not inspect.iscoroutinefunction(entry):
            raise TypeError(f"{self.plan.entry_path} has no `async def run(ctx)`")
        config = {
            key: resolve_value(source, field=key).reveal()
            for key, source in self.plan.config.items()
        }
        secrets = {
            key: resolve_value(source, field=key).reveal()
            for key, source in self.plan.secrets.items()
        }
        state_dir = Path(self.plan.state_dir) / CONNECTIONS_DIR / self.name
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return entry, RuntimeConnectorContext(self, config, secrets, state_dir)

    async def emit(self, event: ConnectorEvent) -> str:
        """Send ``event`` to the Orchestrator once a place in flight is free; its id."""
        if event.name not in self.plan.events:
            declared = ", ".join(self.plan.events)
            raise ValueError(
                f"event {event.name!r} is not declared by Connector/{self.plan.connector_name} "
                f"(declared: {declared})"
            )
        if not event.instance_key.strip():
            raise ValueError(f"event {event.name!r} has no instance key")
        await self._in_flight.acquire()
        self._counter += 1
        event_id = f"{self.name}-{os.getpid()}-{self._counter}"
        self._unsettled.add(event_id)
        self._all_settled.clear()
        properties = {k: v for k, v in event.properties.items() if isinstance(v, str)}
        self._tell(
            wire.ConnectorEventReport(
                event_id, event.name, event.text(), event.instance_key, properties
            )
        )
        return event_id

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> asyncio.Future[TurnAnswer]:
        """:meth:`emit`, then a future of how the event's Turn ended."""
        # No await between the send and the registration: the settlement cannot come first.
        return self.answers.expect(await self.emit(event))

    def _tell(self, body: wire.EventBody) -> None:
        self.channel.send_nowait(wire.event(self.name, ORCHESTRATOR, body))


class RuntimeConnectorContext:
    """The :class:`~tools_base.ConnectorContext` a connector's ``run`` gets in its process."""

    def __init__(
        self,
        host: ConnectorHost,
        config: Mapping[str, str],
        secrets: Mapping[str, str],
        state_dir: Path,
    ) -> None:
        self._host = host
        self._config = dict(config)
        self._secrets = dict(secrets)
        self._state_dir = state_dir

    @property
    def connection_name(self) -> str:
        """The Connection running this connector."""
        return self._host.name

    @property
    def config(self) -> Mapping[str, str]:
        """The Connection's ``config``, resolved."""
        return self._config

    @property
    def secrets(self) -> Mapping[str, str]:
        """The Connection's ``secrets``, resolved; never log them."""
        return self._secrets

    @property
    def logger(self) -> Any:
        """A structured logger bound to the connection."""
        return self._host.log

    @property
    def state_dir(self) -> Path:
        """``<state dir>/connections/<connection>/``, made at boot."""
        return self._state_dir

    async def emit(self, event: ConnectorEvent) -> None:
        """Deliver ``event`` into the swarm (waits while too many are in flight)."""
        await self._host.emit(event)

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> asyncio.Future[TurnAnswer]:
        """Deliver ``event`` as :meth:`emit` does; the future resolves when its Turn ends."""
        return await self._host.emit_awaiting_answer(event)

    def setting(self, *names: str, default: str | None = None) -> str | None:
        """The first of ``names`` in ``secrets``, then ``config``, then the environment."""
        return lookup_setting(names, self._secrets, self._config, os.environ, default)
