"""Runs README commands as a reader types them: in bash, in a directory of their own.

``python`` is this interpreter (its directory first on ``PATH``); no provider key is in the
environment. A command can be edited only by :attr:`Shell.substitutions` (a port that was free,
an id known only at run time). Long-running commands run as :class:`Background` processes in
sessions of their own, without a terminal (standard input is ``/dev/null``), and are stopped at
the end whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bundle.keys import PROVIDER_KEY_ENV

COMMAND_TIMEOUT = 120.0
"""Bound of one foreground command (a loaded machine is slow; none should come near it)."""


class Background:
    """A command left running: its output is read as it comes, with a deadline."""

    def __init__(self, command: str, process: subprocess.Popen[bytes]) -> None:
        self.command = command
        self.process = process
        self.output = b""
        """stdout and stderr together, as read so far."""

    @property
    def text(self) -> str:
        return self.output.decode(errors="replace")

    def read_until(self, wanted: str, deadline: float = 60) -> str:
        """Read until ``wanted`` is in the output (raw reads: nothing is hidden in a buffer);
        the output so far."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        end = time.monotonic() + deadline
        while wanted.encode() not in self.output:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                state = "ended" if ready else f"still silent after {deadline} s"
                raise AssertionError(f"{self.command!r} {state} without {wanted!r}:\n{self.text}")
            self.output += chunk
        return self.text

    def json_event(self, event: str, deadline: float = 60, **fields: Any) -> dict[str, Any]:
        """The first JSON log line of ``event`` (with ``fields``) it writes, waiting for it."""
        end = time.monotonic() + deadline
        while True:
            for line in self.output.splitlines()[: self.output.count(b"\n")]:
                if line.startswith(b"{"):
                    record: dict[str, Any] = json.loads(line)
                    if record.get("event") == event and all(
                        record.get(k) == v for k, v in fields.items()
                    ):
                        return record
            self._read_more(max(0.0, end - time.monotonic()))

    def _read_more(self, deadline: float) -> None:
        """One more chunk of output, or an error if none comes within ``deadline`` s."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], deadline)
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"{self.command!r} wrote nothing more:\n{self.text}")
        self.output += chunk

    def wait(self, deadline: float = 60) -> int:
        """Its exit status once it ends by itself (its output read to the end)."""
        assert self.process.stdout is not None
        end = time.monotonic() + deadline
        fd = self.process.stdout.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"{self.command!r} still runs after {deadline} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.output += chunk
        return self.process.wait(timeout=max(1.0, end - time.monotonic()))

    def stop(self, deadline: float = 60) -> int | None:
        """SIGTERM, as Ctrl-C or ``kill`` would stop it; SIGKILL to its session if it does not
        end in time. Its exit status when it ended from SIGTERM, else ``None``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                return None
            finally:
                self.kill()
        self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL whatever is left of its session."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Shell:
    """bash in ``directory``, as a reader's terminal."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        bin_dir = str(Path(sys.executable).parent)
        keys = set(PROVIDER_KEY_ENV.values())
        self.env = {k: v for k, v in os.environ.items() if k not in keys}
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"
        self.substitutions: list[tuple[str, str]] = []
        """``(as written, as run)``: applied to every command from now on."""
        self.background: list[Background] = []

    def prepare(self, command: str) -> str:
        for written, actual in self.substitutions:
            command = command.replace(written, actual)
        return command

    def run(
        self, command: str, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """``command`` to its end; its output captured."""
        return subprocess.run(
            ["bash", "-c", self.prepare(command)],
            cwd=self.directory,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, command: str, *, exec_: bool = True) -> Background:
        """``command`` left running in a session of its own (``exec``-ed by bash, so a signal
        reaches the program itself), stdout and stderr read together."""
        prepared = self.prepare(command)
        process = subprocess.Popen(
            ["bash", "-c", f"exec {prepared}" if exec_ else prepared],
            cwd=self.directory,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started = Background(prepared, process)
        self.background.append(started)
        return started

    def close(self) -> None:
        """Stop every command still running (the newest first: clients before the daemon)."""
        for started in reversed(self.background):
            started.stop()
