"""A pseudo-terminal with a session of its own, and a program run in it as a shell runs a job.

A holder process becomes the session leader with the pseudo-terminal as its controlling
terminal, in the foreground, as an interactive shell is. It starts the program in the
foreground process group (``COMMAND`` typed at the prompt) or in a process group of its own in
the background (``COMMAND &``), stays its parent so that group is not orphaned (the kernel
stops an orphaned group's terminal reads with EIO, not with SIGTTIN), and hands the terminal
to the job on SIGUSR1 (``fg``). The job's standard input and output are the terminal; its
standard error is a pipe to the test (or the terminal too, with ``log_to_terminal``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

_HOLDER = """\
import fcntl, os, signal, subprocess, sys, termios
background, pid_out, command = sys.argv[1] == "bg", int(sys.argv[2]), sys.argv[3:]
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
job = subprocess.Popen(command, process_group=0 if background else None)
def to_foreground(signum, frame):
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a second fg comes from the background
    os.tcsetpgrp(0, job.pid)
    os.killpg(job.pid, signal.SIGCONT)  # as a shell's fg
signal.signal(signal.SIGUSR1, to_foreground)
os.write(pid_out, str(job.pid).encode())
os.close(pid_out)
sys.exit(job.wait())
"""


class TerminalJob:
    """``command`` run as a job of a terminal session (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: Path,
        background: bool,
        tostop: bool = False,
        log_to_terminal: bool = False,
    ) -> None:
        self.leader, follower = os.openpty()
        if tostop:  # `stty tostop`: a background job's output to the terminal raises SIGTTOU
            attributes = termios.tcgetattr(follower)
            attributes[3] |= termios.TOSTOP
            termios.tcsetattr(follower, termios.TCSANOW, attributes)
        pid_in, pid_out = os.pipe()
        self.holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, "bg" if background else "fg", str(pid_out), *command],
            cwd=cwd,
            stdin=follower,
            stdout=follower,
            stderr=follower if log_to_terminal else subprocess.PIPE,
            start_new_session=True,
            pass_fds=(pid_out,),
        )
        os.close(follower)
        os.close(pid_out)
        self.seen = b""
        """Everything read from the terminal so far."""
        self.pid = self._read_pid(pid_in)
        """The job's process (a process group of its own in the background)."""

    def _read_pid(self, pid_in: int, deadline: float = 30) -> int:
        """The job's pid, as the holder writes it to the pipe (then closes it)."""
        data = b""
        end = time.monotonic() + deadline
        try:
            while True:
                ready, _, _ = select.select([pid_in], [], [], max(0.0, end - time.monotonic()))
                chunk = os.read(pid_in, 64) if ready else b""
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(pid_in)
        if not data:
            raise AssertionError(f"the job did not start (holder: {self.holder.poll()})")
        return int(data)

    def state(self) -> str:
        """The job's state letter in ``/proc/<pid>/stat`` (``T``: stopped)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0]

    def read_until(self, marker: bytes, deadline: float = 30) -> bytes:
        """Read the terminal until ``marker`` shows; everything read so far."""
        end = time.monotonic() + deadline
        while marker not in self.seen:
            ready, _, _ = select.select([self.leader], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {marker!r} on the terminal: {self.seen!r}")
            try:
                chunk = os.read(self.leader, 4096)
            except OSError:  # every process closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"no {marker!r} on the terminal: {self.seen!r}")
            self.seen += chunk
        return self.seen

    def drain(self) -> bytes:
        """Whatever the terminal shows right now, without waiting."""
        while select.select([self.leader], [], [], 0)[0]:
            try:
                chunk = os.read(self.leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.seen += chunk
        return self.seen

    def type(self, text: bytes) -> None:
        """Type ``text`` at the terminal."""
        os.write(self.leader, text)

    def to_foreground(self) -> None:
        """Hand the terminal to the job, as ``fg`` does."""
        os.kill(self.holder.pid, signal.SIGUSR1)

    def close(self) -> None:
        """Kill the whole session (the job, its children, the holder) and reap the holder."""
        for group in (self.pid, self.holder.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        self.holder.wait(timeout=10)
        if self.holder.stderr is not None:
            self.holder.stderr.close()
        os.close(self.leader)
