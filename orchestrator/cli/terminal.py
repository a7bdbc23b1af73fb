"""The daemon's prompt on a terminal, and its place among a shell's jobs.

A daemon started from an interactive shell is a job: ``run goondan.yaml`` in the foreground,
``run goondan.yaml &`` in the background (or moved there with Ctrl-Z and ``bg``). The kernel
stops a background job that reads its terminal (SIGTTIN), or writes to it under ``stty
tostop`` (SIGTTOU), and a stopped daemon answers nothing (not even SIGTERM, until continued).
So the daemon ignores both signals, and its children inherit that: such a read fails with EIO
and such a write goes through, and nothing stops.

The prompt (a line to the entry agent per line typed; Ctrl-D stops the daemon) is offered when
standard input is a terminal whose foreground the daemon owns when it starts, or when asked
with ``run --interactive``. Each prompt waits until the daemon owns the terminal's foreground,
checked again before every prompt and after a read that failed because the job went to the
background; meanwhile the daemon serves as ever (``send``, ``approve``, the HTTP API, the
studio).
"""

from __future__ import annotations

import asyncio
import errno
import os
import queue
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

import structlog

if TYPE_CHECKING:
    from ipc.delegation import DelegateAnswer

FOREGROUND_POLL_SECONDS = 0.5
"""How often a waiting prompt looks whether its job came to the foreground (the kernel tells
no one when ``fg`` hands a terminal over)."""

_log = structlog.get_logger("goondan.terminal")


class TerminalRequired(ValueError):
    """``--interactive`` was given where no prompt can be offered (a usage error)."""


def ignore_terminal_stops() -> None:
    """Never be stopped for using the terminal from the background (see the module
    docstring). Call before any child process starts: they inherit the dispositions."""
    signal.signal(signal.SIGTTIN, signal.SIG_IGN)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)


def owns_foreground(fd: int) -> bool:
    """Whether ``fd`` is a terminal whose foreground process group is this process's."""
    try:
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:  # not a terminal, or no longer this session's controlling terminal
        return False


def stdin_fd() -> int | None:
    """The descriptor of standard input, or ``None`` when there is none."""
    try:
        return sys.stdin.fileno() if sys.stdin is not None else None
    except (OSError, ValueError):  # closed, or replaced by something without a descriptor
        return None


def check_interactive(interactive: bool, *, one_shot: bool, detach: bool) -> None:
    """Refuse ``run --interactive`` where it cannot prompt; raises :class:`TerminalRequired`."""
    if not interactive:
        return
    if one_shot:
        raise TerminalRequired("--interactive is for the daemon; --input answers one request")
    if detach:
        raise TerminalRequired("--interactive and --detach: a detached daemon has no terminal")
    fd = stdin_fd()
    if fd is None or not os.isatty(fd):
        raise TerminalRequired(
            "--interactive: standard input is not a terminal, so there is nowhere to prompt "
            "(leave it out to run the daemon without a prompt)"
        )


def offers_prompt(interactive: bool) -> bool:
    """Whether the daemon offers its prompt: asked for, or it owns its terminal's foreground."""
    fd = stdin_fd()
    if fd is None:
        return False
    return (interactive and os.isatty(fd)) or owns_foreground(fd)


class TerminalLines:
    """Lines typed at the terminal on standard input, one per :meth:`read`, each read only
    while this process owns the terminal's foreground.

    A daemon thread reads: a blocked read must not hold up the daemon's exit.
    """

    def __init__(self, stream: TextIO, out: TextIO) -> None:
        self._stream = stream
        self._out = out
        self._asks: queue.SimpleQueue[tuple[str, asyncio.Future[str | None]] | None] = (
            queue.SimpleQueue()
        )
        self._closed = threading.Event()
        threading.Thread(target=self._serve, name="terminal", daemon=True).start()

    async def read(self, prompt: str) -> str | None:
        """Show ``prompt`` once in the foreground and return the line typed; ``None`` at the
        end of input (Ctrl-D)."""
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._asks.put((prompt, answer))
        return await answer

    def close(self) -> None:
        """Stop waiting for the foreground (a read already under way is left to the exit)."""
        self._closed.set()
        self._asks.put(None)

    def _serve(self) -> None:
        while (ask := self._asks.get()) is not None:
            prompt, answer = ask
            line = self._read_line(prompt)
            try:
                answer.get_loop().call_soon_threadsafe(_settle, answer, line)
            except RuntimeError:  # the event loop is closed: the daemon is exiting
                return
            if line is None:
                return

    def _read_line(self, prompt: str) -> str | None:
        fd = self._stream.fileno()
        waiting = False
        while not self._closed.is_set():
            if not owns_foreground(fd):
                if not waiting:
                    _log.info("the prompt waits until the daemon is in the terminal's foreground")
                    waiting = True
                self._closed.wait(FOREGROUND_POLL_SECONDS)
                continue
            waiting = False
            self._out.write(prompt)
            self._out.flush()
            try:
                return self._stream.readline() or None
            except OSError as exc:
                if exc.errno != errno.EIO:
                    # Not the end of input (that would stop the daemon): the daemon goes on
                    # without a prompt.
                    _log.warning("the terminal cannot be read; no more prompts", error=str(exc))
                    self._closed.wait()
                    return None
                # Sent to the background while reading (Ctrl-Z, bg): SIGTTIN is ignored, so the
                # read fails instead of stopping the daemon. Prompt again in the foreground.
                continue
        return None


def _settle(answer: asyncio.Future[str | None], line: str | None) -> None:
    if not answer.done():  # the prompt loop may have given up on it (the daemon stops)
        answer.set_result(line)


async def prompt_loop(orchestrator: Any, agent: str, instance: str) -> None:
    """A prompt to ``agent``; EOF (Ctrl-D) stops the daemon gracefully, as a stop request
    ends the prompt."""
    lines = TerminalLines(sys.stdin, sys.stdout)
    stopped = asyncio.ensure_future(orchestrator.wait_stopped())
    try:
        while True:
            next_line = asyncio.ensure_future(lines.read(f"{agent}> "))
            await asyncio.wait({next_line, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stopped.done() or next_line.result() is None:
                next_line.cancel()
                fd = stdin_fd()
                if fd is not None and owns_foreground(fd):
                    print()  # the shell's prompt starts on a line of its own
                return
            text = (next_line.result() or "").strip()
            if text:
                await _print_answer(orchestrator, text, agent, instance)
    finally:
        lines.close()
        stopped.cancel()


async def _print_answer(orchestrator: Any, text: str, agent: str, instance: str) -> None:
    from ipc import IpcError

    answer: DelegateAnswer = await orchestrator.request(text, agent=agent, instance_key=instance)
    if answer.ok:
        print(answer.output if answer.output is not None else "")
    else:
        error = answer.error or IpcError("the request failed", code="ERROR")
        print(f"error: {error.message} ({error.code})")
