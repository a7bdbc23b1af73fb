"""``run --detach``: the daemon started in the background, recorded, and found again.

The CLI forks ``python -m orchestrator run`` in a session of its own (standard input closed,
standard output and error appended to ``runner.log`` in the state directory), waits until its
API answers ``/readyz`` (at most :data:`READY_TIMEOUT_SECONDS`), and records it in
``runner.json`` (see :class:`RunnerRecord`). A later ``run --detach`` or ``run --input`` on the
same state finds the live daemon there and uses it instead of starting another; a record whose
process is gone (or is another process now holding its pid) is ignored and replaced.

Imported by the CLI only when a command needs it; it stays free of asyncio at import.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

from goondan.errors import ExitCode, newer_format
from goondan.files import write_atomic
from goondan.time import utc_timestamp

RECORD_NAME = "runner.json"
"""The record of the detached daemon, in the state directory."""
RECORD_FORMAT = 1
"""The version of :data:`RECORD_NAME`'s format (``formatVersion``)."""
LOG_NAME = "runner.log"
"""Where a detached daemon's standard output and error go, in the state directory."""
LOCK_NAME = "runner.lock"
"""Held while one ``run --detach`` looks for a daemon and starts one, so two never race."""
READY_TIMEOUT_SECONDS = 30.0
"""How long a detached daemon may take to answer ``/readyz`` before it is given up and killed."""
STOP_SECONDS = 5.0
"""How long a daemon given up gets to exit after SIGTERM before its group is killed."""
TAIL_LINES = 20
"""Lines of the log shown when a detached daemon does not become ready."""
NOT_FORWARDED = frozenset(
    {"help", "detach", "input", "input_file", "agent", "instance", "json", "file", "config"}
    | {"state_dir", "state_root", "env_file", "stream"}
)
"""Options of ``run`` that concern the command itself, or that are passed on resolved."""


@dataclass(frozen=True, slots=True)
class RunnerRecord:
    """A detached daemon as ``run --detach`` left it: its process (the pid, and the kernel's
    start time of that process, so a pid reused by another process is not mistaken for it),
    when it started, what it runs and where its log goes."""

    pid: int
    process_start: int | None
    started_at: str
    bundle: str
    state_dir: str
    log: str
    swarm: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The file's content."""
        return {
            "formatVersion": RECORD_FORMAT,
            "pid": self.pid,
            "processStart": self.process_start,
            "startedAt": self.started_at,
            "bundle": self.bundle,
            "stateDir": self.state_dir,
            "log": self.log,
            "swarm": self.swarm,
        }

    @classmethod
    def from_json(cls, data: Any) -> RunnerRecord | None:
        """The record ``data`` holds, or ``None`` when it is not one."""
        read = _read(data, _RecordFile)
        if read is None:
            return None
        start, swarm = read.process_start, read.swarm
        return cls(
            read.pid,
            start if isinstance(start, int) else None,
            read.started_at,
            read.bundle,
            read.state_dir,
            read.log,
            swarm=swarm if isinstance(swarm, str) else None,
        )

    def alive(self) -> bool:
        """Whether the recorded process still runs (and is the same process)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process took the pid
            return False
        stat = _proc_stat(self.pid)
        if stat is not None and stat[0] in "ZX":  # exited, not yet reaped by its new parent
            return False
        start = _start_ticks(stat)
        return self.process_start is None or start is None or start == self.process_start


class _RecordFile(msgspec.Struct, rename="camel"):
    """``runner.json`` as it is read back: the fields a record needs must be there and of
    their type; the optional ones are taken only when they are (a hand edit loses them)."""

    pid: Annotated[int, msgspec.Meta(gt=0)]
    """The daemon's pid."""
    started_at: str
    """When it started."""
    bundle: str
    """The configuration it runs."""
    state_dir: str
    """Its state directory."""
    log: str
    """Where its output goes."""
    process_start: object = None
    """The kernel's start time of the process, in clock ticks since boot."""
    swarm: object = None
    """The Swarm it runs."""


class _Versioned(msgspec.Struct, rename="camel"):
    """Only the format of a record, read before the rest (a newer one may differ)."""

    format_version: object = None
    """The record's format (:data:`RECORD_FORMAT`)."""


_S = TypeVar("_S", bound=msgspec.Struct)


def _read(data: object, kind: type[_S]) -> _S | None:
    """``data`` (JSON this program wrote) as ``kind``, or ``None`` when it is not one."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError:
        return None


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``), or
    ``None`` where that cannot be read."""
    return _start_ticks(_proc_stat(pid))


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()  # the command name may hold spaces


def _start_ticks(fields: list[str] | None) -> int | None:
    try:
        return int(fields[19]) if fields is not None else None  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def read_record(state_dir: Path) -> RunnerRecord | None:
    """The record in ``state_dir``, or ``None`` (none, unreadable, or of a newer format)."""
    path = state_dir / RECORD_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    versioned = _read(data, _Versioned)
    if versioned is not None:
        version = versioned.format_version
        refusal = newer_format(path, "runner record", version, RECORD_FORMAT)
        if refusal is not None:
            print(f"warning: {refusal}", file=sys.stderr)
            return None
    return RunnerRecord.from_json(data)


def live_record(state_dir: Path) -> RunnerRecord | None:
    """The record of a detached daemon that still runs, else ``None``."""
    record = read_record(state_dir)
    return record if record is not None and record.alive() else None


def write_record(state_dir: Path, record: RunnerRecord) -> None:
    """Record ``record`` in ``state_dir`` (whole or not at all)."""
    data = json.dumps(record.to_json(), indent=2) + "\n"
    write_atomic(state_dir / RECORD_NAME, data.encode())


@contextlib.contextmanager
def _start_lock(state_dir: Path) -> Iterator[None]:
    fd = os.open(state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for one start at most: bounded by its wait
        yield
    finally:
        os.close(fd)


def forwarded_options(args: argparse.Namespace, run_parser: argparse.ArgumentParser) -> list[str]:
    """The options of ``run`` given in ``args`` that the detached daemon must get too (every
    one but those of :data:`NOT_FORWARDED`), in their long form."""
    words: list[str] = []
    for action in run_parser._actions:
        if not action.option_strings or action.dest in NOT_FORWARDED:
            continue
        value = getattr(args, action.dest, action.default)
        if value is None or value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:  # a flag, or a count (-vv): as many times as given
            words += [flag] * int(value)
        else:
            words += [flag, str(value)]
    return words


@dataclass(frozen=True, slots=True)
class Detach:
    """What ``run --detach`` (or ``run --input``) works with."""

    args: argparse.Namespace
    bundle: Path
    state_dir: Path
    default_state: bool
    """The state directory is the default one (so hints need not name it)."""
    run_parser: Callable[[], argparse.ArgumentParser]

    def hint(self, command: str) -> str:
        """``python -m orchestrator COMMAND`` with what locates this daemon's state."""
        where = "" if self.default_state else f" --state-dir {self.state_dir}"
        return f"python -m orchestrator {command} -c {self.bundle}{where}"


def detach(plan: Detach) -> int | None:
    """``run --detach``: use the live daemon of the state, or start one; ``run --input``: use
    the live detached daemon, or ``None`` (the command runs the swarm itself)."""
    args = plan.args
    if not args.detach:
        record = live_record(plan.state_dir)
        return None if record is None else _reuse(plan, record.pid)
    plan.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _start_lock(plan.state_dir):
        record = live_record(plan.state_dir)
        if record is not None:
            return _reuse(plan, record.pid)
        pid = _answering_pid(plan.state_dir)  # a daemon started otherwise (in the foreground)
        if pid is not None:
            return _reuse(plan, pid)
        return _start(plan)


def _answering_pid(state_dir: Path) -> int | None:
    from orchestrator.http.client import DaemonApi, NoAnswer, NoDaemon
    from orchestrator.operations.answers import Health

    try:
        status, body = DaemonApi(state_dir, timeout=5.0).answer("GET", "/healthz", Health)
    except (NoDaemon, NoAnswer):
        return None
    return body.pid if status == 200 and isinstance(body, Health) else None


def _reuse(plan: Detach, pid: int) -> int:
    args = plan.args
    if args.input is not None:
        return _send(plan)
    if args.json:
        print(json.dumps({"pid": pid, "reused": True, "stateDir": str(plan.state_dir)}))
    else:
        print(f"already running (pid {pid}); nothing started")
        print(f"  status: {plan.hint('status')}")
    return 0


def _send(plan: Detach) -> int:
    """``--input`` to the live daemon, answered as ``run --input`` answers (output, exit)."""
    import asyncio

    from orchestrator.cli.common import fail
    from orchestrator.cli.one_request import answer_one_request

    try:
        return asyncio.run(answer_one_request(_LiveSwarm(plan.state_dir), plan.args))
    except _Gone as exc:  # it stopped meanwhile, or took the request and went away
        return fail(plan.args, ExitCode.NETWORK, str(exc))


class _LiveSwarm:
    """The running daemon of a state directory, seen as ``run --input`` sees its own swarm."""

    def __init__(self, state_dir: Path) -> None:
        from orchestrator.http.client import DaemonApi
        from orchestrator.operations.answers import Readiness

        self.api = DaemonApi(state_dir)
        ready = _read(self._call("GET", "/readyz")[1], Readiness)  # 503 while not ready
        self.entry_agent = ready.entry_agent if ready is not None else ""

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        from orchestrator.http.client import NoAnswer, NoDaemon

        try:
            return self.api.call(method, path, body)
        except (NoDaemon, NoAnswer) as exc:
            raise _Gone(str(exc)) from exc

    async def request(self, text: str, *, agent: str, instance_key: str) -> Any:
        """The daemon's answer to ``text`` for ``agent@instance_key``."""
        from orchestrator.http.client import path_segment

        status, body = self._call(
            "POST",
            f"/v1/agents/{path_segment(agent)}/requests",
            {"input": text, "instanceKey": instance_key},
        )
        return _answer(status, body)

    async def stream(
        self, text: str, agent: str, instance_key: str, sink: Callable[[str, dict[str, Any]], None]
    ) -> Any:
        """:meth:`request` with its text and approvals handed to ``sink`` as they come."""
        from orchestrator.http.client import NoAnswer, NoDaemon, path_segment

        path = f"/v1/agents/{path_segment(agent)}/requests"
        body = {"input": text, "instanceKey": instance_key}
        try:
            status, answer = self.api.call_with_events(
                path, {**body, "stream": True, "relay": True, "approvals": True}, sink
            )
        except (NoDaemon, NoAnswer) as exc:
            raise _Gone(str(exc)) from exc
        return _answer(status, answer)


def _answer(status: int, body: Any) -> Any:
    """The delegate answer of the daemon's ``(status, body)``, a refusal as a failure."""
    from ipc import IpcError
    from ipc.delegation import DelegateAnswer
    from orchestrator.http.client import error_text
    from orchestrator.operations.answers import ErrorBody

    if status in (200, 502):
        try:
            return DelegateAnswer.from_wire(body)
        except IpcError as exc:
            return DelegateAnswer.failure(exc)
    refused = _read(body, ErrorBody)
    return DelegateAnswer.failure(
        IpcError(error_text(body), code=refused.error.code if refused is not None else "ERROR")
    )


class _Gone(Exception):
    """The daemon could not be asked."""


def _start(plan: Detach) -> int:
    args = plan.args
    log_path = plan.state_dir / LOG_NAME
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    offset = os.lseek(log, 0, os.SEEK_END)  # only what this start writes is shown on failure
    command = [sys.executable, "-m", "orchestrator", "run", str(plan.bundle.resolve())]
    command += forwarded_options(args, plan.run_parser())
    if getattr(args, "env_file", None):
        command += ["--env-file", str(Path(args.env_file).resolve())]
    command += ["--state-dir", str(plan.state_dir.resolve())]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own session: no terminal's signals, no hangup
            close_fds=True,
        )
    finally:
        os.close(log)
    failure = _wait_ready(process, plan.state_dir)
    if failure is not None:
        exit_code = _give_up(process)
        print(f"error: the detached daemon (pid {process.pid}) {failure}", file=sys.stderr)
        tail = _tail(log_path, offset)
        if tail:
            print(f"  the last lines of its log ({log_path}):", file=sys.stderr)
            for line in tail:
                print(f"  | {line}", file=sys.stderr)
        return exit_code if exit_code > 0 else int(ExitCode.INTERNAL)
    record = RunnerRecord(
        pid=process.pid,
        process_start=process_start(process.pid),
        started_at=utc_timestamp(),
        bundle=str(plan.bundle.resolve()),
        state_dir=str(plan.state_dir.resolve()),
        log=str(log_path.resolve()),
        swarm=args.swarm,
    )
    write_record(plan.state_dir, record)
    if args.input is not None:  # stdout is the answer's: the news goes to stderr
        print(f"started (pid {process.pid}); its output goes to {log_path}", file=sys.stderr)
        return _send(plan)
    if args.json:
        print(json.dumps({**record.to_json(), "reused": False}))
    else:
        print(f"started (pid {process.pid}); its output goes to {log_path}")
        print(f"  events: {plan.hint('logs')} -f")
        print(f"  stop it: kill {process.pid}")
    return 0


def _wait_ready(process: subprocess.Popen[bytes], state_dir: Path) -> str | None:
    """``None`` once ``process`` serves the API of ``state_dir`` and its entry agent is ready,
    else why not (it exited, or did not get there within :data:`READY_TIMEOUT_SECONDS`)."""
    from orchestrator.http.client import DaemonApi, NoAnswer, NoDaemon
    from orchestrator.operations.answers import Health

    api = DaemonApi(state_dir, timeout=5.0)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    ours = False
    while True:
        code = process.poll()
        if code is not None:
            return f"exited with status {code} before it was ready"
        try:
            if not ours:  # another daemon might hold the socket: it must be this one
                status, body = api.answer("GET", "/healthz", Health)
                ours = status == 200 and isinstance(body, Health) and body.pid == process.pid
            if ours and api.call("GET", "/readyz")[0] == 200:
                return None
        except (NoDaemon, NoAnswer):
            pass
        if time.monotonic() >= deadline:
            return f"was not ready within {READY_TIMEOUT_SECONDS:g} s"
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)  # the poll's pause, cut short by its exit


def _give_up(process: subprocess.Popen[bytes]) -> int:
    """Stop ``process`` and everything of its session (SIGTERM, then SIGKILL); its status."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_SECONDS)
    with contextlib.suppress(ProcessLookupError):  # agents left in its group, if any
        os.killpg(process.pid, signal.SIGKILL)
    code = process.wait(timeout=STOP_SECONDS)
    return code if code > 0 else int(ExitCode.INTERNAL)


def _tail(path: Path, offset: int) -> list[str]:
    try:
        with path.open("rb") as log:
            log.seek(offset)
            data = log.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-TAIL_LINES:]
