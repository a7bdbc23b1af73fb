"""``python -m orchestrator`` as a real subprocess: one-shot commands and a running daemon."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.swarm import write_swarm


def run_cli(
    *args: str,
    cwd: Path,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator *args`` to its end, output captured; ``env`` replaces the
    environment, ``input`` is its standard input (none otherwise)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        env=env,
    )


class Daemon:
    """A daemon in its own session; its stderr is read line by line.

    By default it runs the test swarm (``write_swarm`` with ``extra`` and ``turn_attempts``);
    given ``bundle`` (a
    file in ``directory``), it runs that file instead, with ``env`` added to the environment
    and ``args`` (more options of ``run``) on its command line.
    """

    def __init__(
        self,
        directory: Path,
        extra: str = "",
        *,
        bundle: str | None = None,
        env: Mapping[str, str] | None = None,
        grace: float = 5,
        args: Sequence[str] = (),
        turn_attempts: int = 1,
    ) -> None:
        if bundle is None:
            write_swarm(directory, grace=grace, extra=extra, turn_attempts=turn_attempts)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", bundle or "goondan.yaml", *args],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **env} if env is not None else None,
        )
        self.events: list[dict[str, object]] = []
        self.log = b""
        """Everything read from its stderr so far."""
        self._buffer = b""

    def wait_for(
        self, event: str, deadline: float = 30, *, process: str | None = "orchestrator"
    ) -> dict[str, object]:
        """Read log lines until ``process`` (the Orchestrator, or e.g. ``agent:worker``; any
        with ``None``) logs ``event`` (raw reads: no hidden buffer)."""
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        end = time.monotonic() + deadline
        while True:
            while b"\n" in self._buffer:
                line, _, self._buffer = self._buffer.partition(b"\n")
                record = json.loads(line)
                self.events.append(record)
                if record.get("event") == event and process in (None, record.get("process")):
                    return record
            remaining = end - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                seen = [e.get("event") for e in self.events]
                raise AssertionError(f"no {event!r} within {deadline} s; saw {seen}")
            self.log += chunk
            self._buffer += chunk

    def read_to_end(self, deadline: float = 30) -> bytes:
        """Read its stderr until every writer closed it (the daemon and its children are gone)
        and return the whole log."""
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        end = time.monotonic() + deadline
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"its stderr was still open after {deadline} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.log += chunk
            self._buffer += chunk
        for line in self._buffer.splitlines():
            if line.startswith(b"{"):
                self.events.append(json.loads(line))
        self._buffer = b""
        return self.log

    def drain(self) -> threading.Thread:
        """Read its stderr to the end in a background thread (so a full pipe never stalls a
        daemon nobody waits on), adding its events to :attr:`events`, then close it; join the
        thread returned before reading them."""
        stderr = self.process.stderr
        assert stderr is not None

        def read() -> None:
            with stderr:
                for chunk in iter(lambda: os.read(stderr.fileno(), 65536), b""):
                    self.log += chunk
                    self._buffer += chunk
            for line in self._buffer.splitlines():
                if line.startswith(b"{"):
                    self.events.append(json.loads(line))
            self._buffer = b""

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def child_pids(self) -> set[int]:
        return {int(e["pid"]) for e in self.events if e.get("event") == "agent process spawned"}  # type: ignore[call-overload]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


def wait_gone(pid: int, deadline: float = 15) -> bool:
    """Wait for ``pid`` to exit without polling its state: a pidfd becomes readable at exit."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], deadline)
        return bool(readable)
    finally:
        os.close(fd)


def wait_until_processing(directory: Path, agent: str, deadline: float = 30) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done = run_cli("status", "--json", cwd=directory)
        if done.returncode == 0:
            rows = {r["agent"]: r for r in json.loads(done.stdout)["agents"]}
            if rows.get(agent, {}).get("status") == "processing":
                return
    raise AssertionError(f"{agent} never started processing")


def read_log_until(
    process: subprocess.Popen[bytes],
    event: str | tuple[str, ...],
    deadline: float = 30,
    *,
    agent: str | None = None,
    log: bytes = b"",
) -> bytes:
    """Read the daemon's JSON log (raw reads, no hidden buffer) through its first ``event``
    line (any of them, if several; of ``agent``'s process, if given), looking in ``log`` (read
    before) first; returns ``log`` and what was read, so the caller can keep the whole log."""
    events = (event,) if isinstance(event, str) else event
    assert process.stderr is not None
    fd = process.stderr.fileno()
    data = log
    end = time.monotonic() + deadline

    def seen() -> bool:
        for line in data.splitlines()[: data.count(b"\n")]:  # complete lines only
            if not line.startswith(b"{"):
                continue
            record = json.loads(line)
            if record.get("event") in events and agent in (None, record.get("agent")):
                return True
        return False

    while not seen():
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"no {events} in the log: {data.decode()}")
        data += chunk
    return data


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a daemon's ``--listen``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
