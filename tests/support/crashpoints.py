"""The test's end of :mod:`goondan.crashpoints`: a FIFO a process frozen at a named point
signals on."""

from __future__ import annotations

import os
import select
from pathlib import Path

from goondan.crashpoints import ENV


class Crashpoint:
    """The FIFO a frozen process signals on, held open for reading by the test; ``env`` is
    what the daemon's environment needs for processes to freeze at ``name``."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / "crashpoint.fifo"
        os.mkfifo(self.path)
        self.reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        # A writer of our own, so the FIFO reads as empty (not at its end) until the signal.
        self.keep_open = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        self.env = {ENV: f"{name}={self.path}"}

    def wait(self, deadline: float = 60) -> int:
        """The pid of the process frozen at the point."""
        ready, _, _ = select.select([self.reader], [], [], deadline)
        assert ready, f"no process reached {self.env[ENV]} within {deadline} s"
        line = os.read(self.reader, 4096).decode()
        return int(line.split()[1])

    def close(self) -> None:
        os.close(self.reader)
        os.close(self.keep_open)
