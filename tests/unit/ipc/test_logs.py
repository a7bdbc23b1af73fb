"""Logs keep the exception, and a stderr nobody reads never blocks or kills the logger."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator

import pytest
import structlog

import ipc.logs
from ipc.logs import LineWriter, configure_logging, log_writer


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def _fail() -> None:
    raise ValueError("the disk said no")


@pytest.fixture
def fresh_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer made under this test's captured stderr: the process's writer keeps to the file
    stderr was when it was made, and an earlier test may have made it under another capture."""
    monkeypatch.setattr(ipc.logs, "_writer", None)


@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.usefixtures("fresh_writer")
def test_an_exception_is_logged_with_its_type_message_and_traceback(
    capfd: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", process="test", json=as_json)
    try:
        _fail()
    except ValueError:
        structlog.get_logger().exception("turn failed", agent="a")
    assert log_writer().drain(5)
    err = capfd.readouterr().err
    assert "ValueError: the disk said no" in err
    assert "_fail" in err  # the traceback, not just the message
    if as_json:
        [line] = [json.loads(line) for line in err.splitlines() if "turn failed" in line]
        assert "exc_info" not in line
        assert "ValueError: the disk said no" in line["exception"]


def test_a_full_pipe_drops_and_counts_instead_of_blocking() -> None:
    read_end, write_end = os.pipe()
    try:
        writer = LineWriter(write_end, capacity=1000)  # 110 KB queued: more than a pipe holds
        done = threading.Event()

        def flood() -> None:
            for n in range(50_000):  # far more than the pipe and the queue hold
                writer.write(f"line {n} " + "x" * 100 + "\n")
            done.set()

        threading.Thread(target=flood, daemon=True).start()
        assert done.wait(10), "writing to a logger blocked"
        dropped_while_full = writer.dropped
        assert dropped_while_full > 0
    finally:
        os.close(read_end)  # the reader goes away: writes now fail with EPIPE, never raise
    writer.write("after the reader left\n")
    assert writer.drain(5)  # the blocked write ended with EPIPE; the queue empties
    assert writer.dropped > dropped_while_full
    os.close(write_end)
