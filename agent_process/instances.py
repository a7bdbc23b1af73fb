"""Conversation instances of one agent: a FIFO queue, a conversation and a workdir each.

Turns of one instance run one after another in arrival order; different instances run
concurrently. A message that arrives while its instance is busy is queued, refused or
interrupts the running Turn, by the agent's ``policy.concurrency`` (see
:mod:`agent_process.instance_policy` and :meth:`InstanceManager.admit`). On disk, under the state directory::

    agents/<agent>/instances/<instance-dir>/
        metadata.json          see goondan.state_files.metadata
        conversation/          base.jsonl + events.jsonl (see agent_process.conversation)
        workspace/             ctx.workdir of the instance's tools
"""

from __future__ import annotations

__all__ = [
    "Instance",
    "InstanceBusy",
    "InstanceKeyConflict",
    "InstanceManager",
    "InstanceQueueFull",
    "QueuedTurn",
    "instance_dir_name",
]

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import structlog

from agent_process.conversation import (
    ConversationStorageError,
    ConversationStore,
)
from agent_process.instance_files import (
    InstanceKeyConflict,
    StatusRecorder,
    claim_instance_directory,
    instance_dir_name,
    read_instance_metadata,
    recorded_key,
    write_metadata,
)
from agent_process.instance_policy import InstanceBusy, QueuedTurn, settle, supersede
from agent_process.storage import InstanceStorage, LocalFiles
from agent_process.turn import TurnInput, TurnResult, TurnRunner
from agent_process.turn_resume import find_turn
from agent_process.workdirs import open_workdir
from bundle.spec_agent import Concurrency
from goondan.defaults import CONCURRENCY, INSTANCE_METADATA_FORMAT, MAX_QUEUED_TURNS_PER_INSTANCE
from goondan.errors import DeliveryCode, DeliveryError
from goondan.state_files import metadata as metadata_file
from goondan.time import utc_timestamp
from goondan.usage import Usage
from ipc.protocol import DEFAULT_INSTANCE_KEY
from tools_base._pinned import PinnedDir


class InstanceQueueFull(DeliveryError):
    """The instance already has the maximum number of queued Turns."""

    code = DeliveryCode.E_INSTANCE_QUEUE_FULL


def _fail_queued(queued: list[QueuedTurn], exc: Exception) -> None:
    """Answer the callers of ``queued`` Turns with the error ``exc`` (and its code)."""
    code = getattr(exc, "code", None)
    for turn in queued:
        if not turn.future.done():
            turn.future.set_result(
                TurnResult.failed(
                    turn.turn_input,
                    code if isinstance(code, str) else DeliveryCode.E_INTERNAL,
                    str(exc) or type(exc).__name__,
                )
            )


def _release(instance: Instance) -> None:
    if instance.pin is not None:  # a tool still running holds a duplicate of its own
        instance.pin.close()


@dataclass(eq=False)
class Instance:
    """One conversation of the agent."""

    key: str
    directory: Path
    store: ConversationStore
    workdir: Path
    queue: asyncio.Queue[QueuedTurn] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None
    busy: bool = False
    created_at: str = field(default_factory=utc_timestamp)
    spawned_by: dict[str, str] | None = None
    """``{agent, instanceKey, at}`` of the ``agents__spawn`` that prepared it, if one did."""
    custom_workdir: bool = False
    """The workdir was chosen at spawn (kept in the metadata, so it survives restarts)."""
    usage: Usage = field(default_factory=Usage)
    """Everything its model calls ever used (kept in the metadata; instance budgets judge it)."""
    current: QueuedTurn | None = None
    """The Turn running now, if any."""
    restarting: bool = False
    """Its worker is being stopped for a restart: the queued Turns stay for the reloaded one."""
    last_admitted: QueuedTurn | None = None
    """The newest caller's message admitted (see :meth:`InstanceManager.admit`)."""
    pin: PinnedDir | None = None
    """``workdir`` opened once (see :mod:`agent_process.workdirs`); released when unloaded."""
    recorded: tuple[str, int] = ("", 0)
    """The status and model calls of its latest metadata record (written, or waiting to be):
    a record that would say the same again is not made."""


def _begun_here(instance: Instance, turn_input: TurnInput) -> bool:
    """Whether ``turn_input``'s request already began a Turn in ``instance`` (delivered again
    after its agent died): it was admitted then, so no policy refuses it now; it waits its
    turn and is taken up (:mod:`agent_process.turn_resume`)."""
    if not turn_input.may_resume or not turn_input.request_id:
        return False
    return find_turn(instance.store.messages, turn_input.request_id) is not None


class InstanceManager:
    """Owns the instances of one agent and their worker tasks."""

    def __init__(
        self,
        agent_name: str,
        state_dir: Path,
        runner: TurnRunner,
        *,
        max_queued: int = MAX_QUEUED_TURNS_PER_INSTANCE,
        on_busy_change: Callable[[bool], None] | None = None,
        check_workdir: Callable[[Path, dict[str, object] | None], None] | None = None,
        storage: InstanceStorage | None = None,
        concurrency: Concurrency = CONCURRENCY,
    ) -> None:
        """``check_workdir(workdir, spawned_by)`` judges a workdir chosen at spawn each time
        its instance loads, and raises (an error with a ``code``) to refuse it. ``storage``
        keeps the conversations (default: files under ``state_dir``). ``concurrency`` is the
        agent's ``policy.concurrency``, which :meth:`admit` applies."""
        if concurrency not in get_args(Concurrency):
            raise ValueError(f"unknown concurrency policy {concurrency!r}")
        self.concurrency: Concurrency = concurrency
        self.storage: InstanceStorage = storage if storage is not None else LocalFiles()
        self.agent_name = agent_name
        self._check_workdir = check_workdir
        self.state_dir = state_dir
        self.root = state_dir / "agents" / agent_name / "instances"
        self.runner = runner
        self.max_queued = max_queued
        self._instances: dict[str, Instance] = {}
        self._on_busy_change = on_busy_change
        self._busy_count = 0
        self._log = structlog.get_logger("goondan.instances").bind(agent=agent_name)
        self._status = StatusRecorder(self._log, mirror=self.storage.records)

    def get(self, key: str = DEFAULT_INSTANCE_KEY) -> Instance:
        """The instance ``key``, loading it from disk (or creating it) on first use.

        Raises :class:`InstanceKeyConflict`, ``ConversationUnreadable`` or
        ``ConversationStorageError`` (each with a ``code``) when it cannot be loaded; nothing
        is kept in memory then, so a later call tries again.
        """
        return self._load(key, for_turn=False)

    def _load(self, key: str, *, for_turn: bool) -> Instance:
        """:meth:`get`; ``for_turn``: a Turn of it is queued next, so an instance loaded now
        is recorded ``processing`` at once (one record, not ``idle`` then ``processing``)."""
        instance = self._instances.get(key)
        if instance is None:
            directory, existed = claim_instance_directory(self.root, key)
            store = self.storage.conversation(directory)
            store.load(new=not existed)
            if store.pending_events:
                self._log.warning(
                    "resuming conversation with unfolded events",
                    instance_key=key,
                    events=store.pending_events,
                )
            recorded = read_instance_metadata(directory) if existed else {}
            custom = recorded.get("workdir")
            workdir = Path(custom) if isinstance(custom, str) else directory / "workspace"
            spawned_by = recorded.get("spawnedBy")
            if isinstance(custom, str) and self._check_workdir is not None:
                self._check_workdir(workdir, spawned_by if isinstance(spawned_by, dict) else None)
            pin = open_workdir(workdir, self.state_dir)
            created_at = recorded.get("createdAt")
            instance = Instance(
                key=key,
                directory=directory,
                store=store,
                workdir=workdir,
                created_at=created_at if isinstance(created_at, str) else utc_timestamp(),
                spawned_by=spawned_by if isinstance(spawned_by, dict) else None,
                custom_workdir=isinstance(custom, str),
                usage=Usage.from_json(recorded.get("usage")),
                pin=pin,
            )
            self._instances[key] = instance
            self._write_metadata(instance, busy=for_turn, new=not recorded)
        return instance

    def is_idle(self, key: str) -> bool:
        """Loaded, with no Turn running or queued (an unloaded instance is not idle: it has
        nothing to take)."""
        instance = self._instances.get(key)
        return instance is not None and not instance.busy and instance.queue.empty()

    def exists(self, key: str) -> bool:
        """Whether instance ``key`` is loaded or has files on disk."""
        return key in self._instances or recorded_key(self.root / instance_dir_name(key)) == key

    def prepare(
        self, key: str, *, workdir: Path | None, spawned_by: dict[str, str]
    ) -> tuple[Instance, bool]:
        """Create instance ``key`` for ``agents__spawn`` (its workdir, who asked), or return
        the existing one unchanged; the flag says whether it was created now."""
        if self.exists(key):
            return self.get(key), False
        directory, _ = claim_instance_directory(self.root, key)
        metadata: dict[str, object] = {
            "formatVersion": INSTANCE_METADATA_FORMAT,
            "instanceKey": key,
            "spawnedBy": spawned_by,
        }
        if workdir is not None:
            metadata["workdir"] = str(workdir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConversationStorageError(directory, exc) from exc
        data = metadata_file.write_metadata(directory, metadata)
        if self.storage.records is not None:
            self.storage.records.written(directory / metadata_file.FILE_NAME, data)
        return self.get(key), True

    def forget(self, key: str) -> bool:
        """Drop an idle instance from memory (its files are the caller's to remove)."""
        instance = self._instances.get(key)
        if instance is None:
            return True
        if instance.busy or not instance.queue.empty():
            return False
        if instance.worker is not None:
            instance.worker.cancel()
        instance.store.close()
        _release(instance)
        del self._instances[key]
        return True

    def delete(self, key: str) -> bool | None:
        """Forget instance ``key`` and remove its files; ``None`` (nothing done) while a Turn
        of it is queued or running, else whether it had files.

        Synchronous on the agent's loop, so no Turn can start between the check and the
        removal, and a Turn that arrives later starts a fresh conversation.
        """
        if not self.forget(key):
            return None
        self._status.flush()  # a record still being written must not recreate what goes
        directory, existed = claim_instance_directory(self.root, key)
        shutil.rmtree(directory, ignore_errors=True)
        if self.storage.records is not None:
            self.storage.records.instance_removed(directory)
        return existed

    async def restart(
        self, key: str, stopped: Callable[[TurnInput], TurnResult], wait_seconds: float
    ) -> tuple[bool, int]:
        """Drop instance ``key`` from memory and load it again from disk, keeping its queue.

        A running Turn ends now: its caller gets ``stopped(its input)`` at once, and its
        worker is cancelled (what the Turn stored stays stored, as after a kill; a tool call
        it left unanswered is answered ``E_TOOL_INTERRUPTED`` by the next Turn). Turns still
        queued, and those submitted meanwhile, then run on the reloaded conversation. Returns
        whether the instance was loaded (an unloaded one has nothing to restart) and how many
        Turns were stopped. Raises ``TimeoutError`` when the worker does not stop within
        ``wait_seconds`` (nothing is reloaded then), or what loading raises (see :meth:`get`).
        """
        instance = self._instances.get(key)
        if instance is None:
            return False, 0
        count = await self._stop_worker(instance, stopped, wait_seconds)
        queued: list[QueuedTurn] = []
        while not instance.queue.empty():
            queued.append(instance.queue.get_nowait())
        instance.store.close()
        _release(instance)
        if self._instances.get(key) is instance:
            del self._instances[key]
        try:
            fresh = self.get(key)
        except Exception as exc:  # unreadable now: the queued callers are told, not left
            _fail_queued(queued, exc)
            raise
        for turn in queued:
            fresh.queue.put_nowait(turn)
        if queued:
            fresh.worker = asyncio.get_running_loop().create_task(
                self._serve(fresh), name=f"instance:{self.agent_name}:{key}"
            )
        return True, count

    @staticmethod
    async def _stop_worker(
        instance: Instance, stopped: Callable[[TurnInput], TurnResult], wait_seconds: float
    ) -> int:
        """Cancel ``instance``'s worker, its running Turn's caller answered ``stopped(input)``;
        how many Turns were stopped. Raises ``TimeoutError`` when it does not stop in time."""
        worker = instance.worker
        if worker is None or worker.done():
            return 0
        count = 0
        current = instance.current
        if current is not None and not current.future.done():
            current.future.set_result(stopped(current.turn_input))
            count = 1
        instance.restarting = True
        worker.cancel()
        await asyncio.wait({worker}, timeout=wait_seconds)
        if not worker.done():
            instance.restarting = False
            raise TimeoutError(f"the Turn of instance {instance.key!r} did not stop")
        return count

    def conversation_directory(self, key: str) -> Path:
        """Where the conversation of instance ``key`` lives (loaded or not)."""
        return self.root / instance_dir_name(key) / "conversation"

    def keys(self) -> list[str]:
        """Keys of the instances loaded in this process."""
        return list(self._instances)

    def submit(
        self, key: str, turn_input: TurnInput, *, on_start: Callable[[], None] | None = None
    ) -> asyncio.Future[TurnResult]:
        """Queue a Turn on instance ``key``; the future resolves with its result (never raises).

        ``on_start`` is called when the Turn leaves the queue and begins: until then, the Turn
        has had no effect and could be delivered again elsewhere. The Turn waits its turn
        whatever the agent's policy: see :meth:`admit` for a caller's message.
        """
        instance = self._load(key, for_turn=True)
        return self._enqueue(instance, QueuedTurn(turn_input, self._future(), on_start))

    def admit(
        self, key: str, turn_input: TurnInput, *, on_start: Callable[[], None] | None = None
    ) -> asyncio.Future[TurnResult]:
        """Like :meth:`submit`, for a caller's message, by the agent's ``policy.concurrency``
        when instance ``key`` is running or has queued a Turn: ``enqueue`` queues it,
        ``reject`` raises :class:`InstanceBusy`, ``interrupt`` queues it and has every earlier
        admitted Turn stop at its next Step boundary, its caller answered with this Turn's
        answer (see :mod:`agent_process.instance_policy`)."""
        instance = self._load(key, for_turn=True)
        busy = instance.current is not None or not instance.queue.empty()
        # A request whose Turn began here before its agent died was admitted then: it takes
        # no part in the policy now (it neither is refused nor interrupts, nor is interrupted).
        begun = busy and self.concurrency != "enqueue" and _begun_here(instance, turn_input)
        if begun:
            return self._enqueue(instance, QueuedTurn(turn_input, self._future(), on_start))
        if busy and self.concurrency == "reject":
            raise InstanceBusy(
                f"instance {key!r} of agent {self.agent_name!r} is running a Turn "
                "(policy.concurrency: reject); retry once it has answered"
            )
        turn = QueuedTurn(turn_input, self._future(), on_start)
        future = self._enqueue(instance, turn)
        # Each admitted Turn supersedes the one before it, so a chain leads every interrupted
        # caller to the newest Turn's answer.
        previous, instance.last_admitted = instance.last_admitted, turn
        if busy and self.concurrency == "interrupt" and previous is not None:
            self._interrupt(previous, turn)
        return future

    def _interrupt(self, previous: QueuedTurn, newer: QueuedTurn) -> None:
        if not supersede(previous, newer):
            return
        # Said at once (a running Turn's turn.cancelling event), before its Step ends.
        if not self.runner.interrupting(previous.cancellation):
            self._log.info("queued turn superseded by a newer message")

    @staticmethod
    def _future() -> asyncio.Future[TurnResult]:
        return asyncio.get_running_loop().create_future()

    def _enqueue(self, instance: Instance, turn: QueuedTurn) -> asyncio.Future[TurnResult]:
        key = instance.key
        if instance.queue.qsize() >= self.max_queued:
            raise InstanceQueueFull(
                f"instance {key!r} of agent {self.agent_name!r} already has "
                f"{self.max_queued} queued turns"
            )
        future = turn.future
        instance.queue.put_nowait(turn)
        if instance.worker is None or instance.worker.done():
            instance.worker = asyncio.get_running_loop().create_task(
                self._serve(instance), name=f"instance:{self.agent_name}:{key}"
            )
        return future

    @property
    def busy(self) -> bool:
        """Whether any instance is running a Turn or has one queued."""
        return any(i.busy or not i.queue.empty() for i in self._instances.values())

    async def drain(self) -> None:
        """Wait until every queued Turn has finished."""
        while True:
            workers = [
                i.worker for i in self._instances.values() if i.worker and not i.worker.done()
            ]
            if not workers:
                await self._status.aflush()
                return
            await asyncio.wait(workers)

    async def close(self) -> None:
        """Cancel the workers; queued Turns that never started are failed with ``cancelled``."""
        for instance in self._instances.values():
            if instance.worker is not None:
                instance.worker.cancel()
        workers = [i.worker for i in self._instances.values() if i.worker is not None]
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)
        await self._status.aflush()

    async def _serve(self, instance: Instance) -> None:
        try:
            while not instance.queue.empty() and not instance.restarting:
                queued = instance.queue.get_nowait()
                future = queued.future
                if future.cancelled():
                    continue
                instance.current = queued
                self._set_busy(instance, True)
                try:
                    if queued.on_start is not None:
                        queued.on_start()
                    result = await self.runner.run(
                        instance.key,
                        instance.store,
                        instance.workdir,
                        queued.turn_input,
                        usage=instance.usage,
                        workdir_pin=instance.pin,
                        cancellation=queued.cancellation,
                    )
                except Exception as exc:  # the caller is answered now, never left to time out
                    result = self._failed_turn(instance, queued.turn_input, exc)
                except asyncio.CancelledError:  # stopped (past a drain's grace): say so too
                    future.cancel()
                    raise
                finally:
                    instance.current = None
                    self._set_busy(instance, False)
                settle(queued, result)
        finally:
            while not instance.queue.empty() and not instance.restarting:
                instance.queue.get_nowait().future.cancel()
            if not instance.busy:  # recorded processing when loaded, its Turn never ran
                self._record(instance, busy=False)

    def _failed_turn(self, instance: Instance, turn_input: TurnInput, exc: Exception) -> TurnResult:
        """The answer for a Turn that raised (a write the disk refused, say).

        The conversation is read back from disk, so what the next Turn sees is exactly what
        is stored; if even that fails, the instance is dropped from memory and loaded afresh
        on its next use.
        """
        code = getattr(exc, "code", None)
        if isinstance(exc, ConversationStorageError):
            self._log.error("turn not stored", instance_key=instance.key, error=str(exc))
        else:
            self._log.exception("turn failed unexpectedly", instance_key=instance.key)
        try:
            instance.store.load()
        except Exception as reload_error:
            self._log.warning(
                "conversation not reloaded; dropped from memory",
                instance_key=instance.key,
                error=str(reload_error),
            )
            if self._instances.get(instance.key) is instance:
                del self._instances[instance.key]
        return TurnResult.failed(
            turn_input,
            code if isinstance(code, str) else DeliveryCode.E_INTERNAL,
            str(exc) or type(exc).__name__,
        )

    def _set_busy(self, instance: Instance, busy: bool) -> None:
        instance.busy = busy
        self._busy_count += 1 if busy else -1
        self._record(instance, busy)
        if self._on_busy_change is not None and (
            (busy and self._busy_count == 1) or (not busy and self._busy_count == 0)
        ):
            self._on_busy_change(busy)

    def _record(self, instance: Instance, busy: bool) -> None:
        """Have the instance's metadata written soon, unless its latest record (written or
        waiting) says the same."""
        state = ("processing" if busy else "idle", instance.usage.calls)
        if state != instance.recorded:
            instance.recorded = state
            self._status.record(instance.directory, self._metadata(instance, busy))

    def _write_metadata(self, instance: Instance, *, busy: bool, new: bool) -> None:
        """Record the instance's metadata now (when it is loaded or created): made in place
        when ``new`` (it has none yet), else replaced.

        A new instance loaded ``busy`` (for the Turn queued next) is made without forcing it
        to disk: the ``idle`` record at that Turn's end replaces it through
        :func:`goondan.files.write_atomic`, which forces the file and the instance directory
        (its ``conversation/`` entry too). Until then a power cut can lose the new instance
        whole, as it loses the Turn it was made for, which the caller's request brings again;
        two fsyncs on the loop per new conversation are saved."""
        metadata = self._metadata(instance, busy=busy)
        instance.recorded = (str(metadata["status"]), instance.usage.calls)
        if new and self._create_metadata(instance, metadata, durable=not busy):
            return
        try:
            instance.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._log.warning(
                "instance metadata not written", instance_key=instance.key, error=str(exc)
            )
            return
        write_metadata(instance.directory, metadata, self._log, self.storage.records)

    def _create_metadata(
        self, instance: Instance, metadata: dict[str, object], *, durable: bool
    ) -> bool:
        """Make a new instance's ``metadata.json`` in place (its directory exists: the
        conversation's load made it); ``False`` when it must be replaced instead (a file is
        there after all) or could not be made (the replacement says why)."""
        try:
            data = metadata_file.create_metadata(instance.directory, metadata, durable=durable)
            if data is not None and self.storage.records is not None:
                self.storage.records.written(instance.directory / metadata_file.FILE_NAME, data)
        except ConversationStorageError:
            return False
        return data is not None

    def _metadata(self, instance: Instance, busy: bool) -> dict[str, object]:
        metadata: dict[str, object] = {
            "formatVersion": INSTANCE_METADATA_FORMAT,
            "agentName": self.agent_name,
            "instanceKey": instance.key,
            "status": "processing" if busy else "idle",
            "createdAt": instance.created_at,
            "updatedAt": utc_timestamp(),
        }
        if instance.custom_workdir:
            metadata["workdir"] = str(instance.workdir)
        if instance.spawned_by is not None:
            metadata["spawnedBy"] = instance.spawned_by
        if instance.usage.calls:
            metadata["usage"] = instance.usage.to_json()
        return metadata

    def usage_changed(self, key: str) -> None:
        """A model call of instance ``key`` added to its usage: record it soon (a crash later
        in the Turn must not forget what was spent)."""
        instance = self._instances.get(key)
        if instance is not None:
            self._record(instance, instance.busy)
