"""Run one Connection's connector: import it, give it a context, relay what it emits.

Boot: the connector module is imported, its ``run`` looked up and the Connection's config and
secrets resolved; any failure there is reported as ``boot_failed`` (exit
:data:`~ipc.protocol.EXIT_BOOT_FAILURE`) so ``status`` names it and the supervisor backs off.
Then the events its ingress journal (:mod:`connector_process.journal`) still owes the daemon
are sent again, ``ready``, and ``run(ctx)`` runs until:

- a ``shutdown`` arrives (or SIGTERM): ``run`` is cancelled, the process exits 0;
- ``run`` returns: the source is exhausted; the process waits until its events in flight are
  settled, then exits 0 (the Orchestrator then stops the swarm, as the ``cli`` connector at end
  of input wants);
- ``run`` raises :class:`~tools_base.ConnectorError` (a missing key, a port in use): reported
  as ``boot_failed``, exit :data:`~ipc.protocol.EXIT_BOOT_FAILURE`, so ``status`` names it;
- ``run`` raises anything else: reported as ``connector_health`` with the error, logged, exit 1,
  a crash the supervisor restarts with backoff;
- the pipe to the Orchestrator closes: the process exits (no orphan connector).

Every event is journaled before ``emit`` (or ``accept``) returns, so before a sender is
answered; the daemon's settlement removes it. Errors reported to the daemon go through a
:class:`~connector_process.health.Redactor` first: no secret reaches ``status``.
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
from connector_process.answers import AnswerWaiters
from connector_process.health import Redactor
from connector_process.journal import (
    FILE_NAME as JOURNAL_FILE,
)
from connector_process.journal import (
    IngressJournal,
    JournaledEvent,
    JournalUnreadable,
    delivery_event_id,
    new_event_id,
)
from goondan import crashpoints
from goondan.defaults import CONNECTIONS_DIR
from goondan.proctitle import name_process
from ipc import Channel, EventMessage, IpcMessage, ShutdownMessage, build
from ipc.events import (
    BootFailed,
    ConnectorEventReport,
    ConnectorEventSettled,
    ConnectorHealth,
    Ready,
    read_event,
)
from ipc.logs import configure_logging, log_writer
from ipc.payload import EventBody
from ipc.protocol import EXIT_BOOT_FAILURE, ORCHESTRATOR, EventKind
from ipc.scope import SCOPE_ENV, new_scope
from tools_base import ConnectorEvent, TurnAnswer
from tools_base._connector import ConnectorError, lookup_setting

EXIT_CRASHED = 1
ACCEPT_BACKLOG = 256
"""Events ``accept`` took that wait for a place in flight, at most; past it ``accept``
refuses (the HTTP connectors answer 503, which their senders retry)."""


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
        """Journaled events the daemon has not settled yet (sent or waiting to be)."""
        self._sent: set[str] = set()
        """Those of them holding a place in flight."""
        self._all_settled = asyncio.Event()
        self._all_settled.set()
        self.answers = AnswerWaiters()
        self._stopping = asyncio.Event()
        self.journal = IngressJournal(None)
        self.redact = Redactor({}, {}, os.environ)
        self._failing: bool | None = None
        """Whether the last health report was a failure (``None``: none sent yet)."""
        self._tasks: set[asyncio.Task[None]] = set()

    # -- messages from the Orchestrator ----------------------------------------------------

    def on_message(self, message: IpcMessage) -> None:
        if isinstance(message, ShutdownMessage):
            self.stop()
        elif (
            isinstance(message, EventMessage) and message.kind == EventKind.CONNECTOR_EVENT_SETTLED
        ):
            try:
                body = read_event(message)
            except Exception as exc:
                self.log.warning("event refused", kind=message.kind, error=str(exc))
                return
            assert isinstance(body, ConnectorEventSettled)
            self._settled(body)

    def _settled(self, body: ConnectorEventSettled) -> None:
        if body.event_id not in self._unsettled:
            return
        self._unsettled.discard(body.event_id)
        self.answers.settle(body)
        if body.event_id in self._sent:
            self._sent.discard(body.event_id)
            self._in_flight.release()
        if body.error is not None:
            self.log.warning("event not handled", event_id=body.event_id, error=body.error)
        self._spawn(self.journal.settle(body.event_id))
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
            await self.journal.open()
        except Exception as exc:
            return await self._cannot_start(exc)
        owed = self.journal.unsettled()
        for journaled in owed:  # before any new event, in the order they were accepted
            self._unsettled.add(journaled.event_id)
            self._all_settled.clear()
            self._spawn(self._send(journaled))
        self._tell(Ready(os.getpid(), os.environ.get(SCOPE_ENV)))
        self.log.info("connector started", events_owed=len(owed))
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
        if isinstance(error, ConnectorError):  # set up wrongly: restarting at once cannot help
            return await self._cannot_start(error)
        if error is not None:
            text = self.redact(f"{type(error).__name__}: {error}")
            self.log.error("connector failed", error=text)
            self._tell(ConnectorHealth(text))
            await self.channel.flush()
            return EXIT_CRASHED
        # The source is exhausted: finish what is in flight (or stop when asked to).
        self.log.info("connector finished; waiting for its events", in_flight=len(self._unsettled))
        settled = asyncio.ensure_future(self._all_settled.wait())
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({settled, stopping}, return_when=asyncio.FIRST_COMPLETED)
        settled.cancel()
        stopping.cancel()
        return 0

    async def _cannot_start(self, exc: BaseException) -> int:
        message = self.redact(
            str(exc) if isinstance(exc, ConnectorError) else f"{type(exc).__name__}: {exc}"
        )
        self.log.error("connector cannot start", error=message)
        self._tell(BootFailed(message))
        await self.channel.flush()
        return EXIT_BOOT_FAILURE

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
        self.redact = Redactor(secrets, config, os.environ)
        state_dir = Path(self.plan.state_dir) / CONNECTIONS_DIR / self.name
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            self.journal = IngressJournal(state_dir / JOURNAL_FILE)
        except JournalUnreadable as exc:
            raise ConnectorError(str(exc)) from None
        return entry, RuntimeConnectorContext(self, config, secrets, state_dir)

    async def emit(self, event: ConnectorEvent) -> str:
        """Journal ``event``, then send it to the Orchestrator once a place in flight is free;
        its id. A delivery journaled already is not sent again (its first copy is)."""
        journaled, new = await self._journaled(event)
        if new:
            await self._send(journaled)
        return journaled.event_id

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> asyncio.Future[TurnAnswer]:
        """:meth:`emit`, then a future of how the event's Turn ended."""
        # No await between the send and the registration: the settlement cannot come first.
        return self.answers.expect(await self.emit(event))

    async def accept(self, event: ConnectorEvent) -> bool:
        """Journal ``event`` and send it in the background; ``False`` (nothing journaled) when
        :data:`ACCEPT_BACKLOG` events wait already or the journal cannot be written."""
        if len(self._unsettled) - len(self._sent) >= ACCEPT_BACKLOG:
            self.log.warning(
                "too many accepted events waiting; event refused", event_name=event.name
            )
            return False
        try:
            journaled, new = await self._journaled(event)
        except OSError:
            return False
        if new:
            self._spawn(self._send(journaled))
        return True

    async def _journaled(self, event: ConnectorEvent) -> tuple[JournaledEvent, bool]:
        """``event`` checked and on disk in the journal (``OSError`` when it cannot be), and
        whether it is new: ``False`` for a delivery the journal holds already."""
        if event.name not in self.plan.events:
            declared = ", ".join(self.plan.events)
            raise ValueError(
                f"event {event.name!r} is not declared by Connector/{self.plan.connector_name} "
                f"(declared: {declared})"
            )
        if not event.instance_key.strip():
            raise ValueError(f"event {event.name!r} has no instance key")
        properties = {k: v for k, v in event.properties.items() if isinstance(v, str)}
        event_id = (
            new_event_id(self.name)
            if event.delivery_id is None
            else delivery_event_id(self.name, event.delivery_id)
        )
        journaled = JournaledEvent(
            event_id, event.name, event.text(), event.instance_key, properties
        )
        try:
            new = await self.journal.accept(journaled)
        except OSError as exc:
            self.log.error(
                "event not journaled", event_name=event.name, error=exc.strerror or str(exc)
            )
            raise
        if not new:
            self.log.info("delivery accepted already", event_name=event.name, event_id=event_id)
            return journaled, False
        self._unsettled.add(journaled.event_id)
        self._all_settled.clear()
        crashpoints.point("connector.journaled")
        return journaled, True

    async def _send(self, journaled: JournaledEvent) -> None:
        """Send a journaled event once a place in flight is free."""
        await self._in_flight.acquire()
        if journaled.event_id not in self._unsettled:  # settled meanwhile (a replay's twin)
            self._in_flight.release()
            return
        self._sent.add(journaled.event_id)
        self._tell(
            ConnectorEventReport(
                journaled.event_id,
                journaled.name,
                journaled.text,
                journaled.instance_key,
                journaled.properties,
            )
        )

    # -- health ------------------------------------------------------------------------------

    def report_failure(self, reason: str) -> None:
        """Tell the daemon the source failed (each failure counts), secrets removed."""
        self._failing = True
        self._tell(ConnectorHealth(self.redact(reason)))

    def report_success(self) -> None:
        """Tell the daemon the source works, when it was failing (or nothing was said yet)."""
        if self._failing is not False:
            self._failing = False
            self._tell(ConnectorHealth(None))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _tell(self, body: EventBody) -> None:
        self.channel.send_nowait(build.event(self.name, ORCHESTRATOR, body))


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
        """Journal ``event`` and deliver it into the swarm (waits while too many are in
        flight)."""
        await self._host.emit(event)

    async def emit_awaiting_answer(self, event: ConnectorEvent) -> asyncio.Future[TurnAnswer]:
        """Deliver ``event`` as :meth:`emit` does; the future resolves when its Turn ends."""
        return await self._host.emit_awaiting_answer(event)

    async def accept(self, event: ConnectorEvent) -> bool:
        """Journal ``event`` and deliver it in the background; ``False`` when it cannot be
        taken now."""
        return await self._host.accept(event)

    def report_failure(self, reason: str) -> None:
        """Tell the daemon the source failed: ``status`` shows ``reason`` (secrets removed)."""
        self._host.report_failure(reason)

    def report_success(self) -> None:
        """Tell the daemon the source works (resets its count of failures in a row)."""
        self._host.report_success()

    def setting(self, *names: str, default: str | None = None) -> str | None:
        """The first of ``names`` in ``secrets``, then ``config``, then the environment."""
        return lookup_setting(names, self._secrets, self._config, os.environ, default)
