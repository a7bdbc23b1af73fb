"""The cli connector: lines of a real pipe (or file) in, events out, end of input ends it."""

from __future__ import annotations

import asyncio
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.connector_harness import RecordingContext
from tests.support.connector_run import STOP_SECONDS, LoggingContext, running
from tools_base import ConnectorError, ConnectorEvent, TextMessage
from tools_base.connectors.cli import line_event, run

WAIT = 10.0


class Pipe:
    """A pipe whose read end is the connector's standard input."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    def write(self, data: bytes) -> None:
        os.write(self.write_fd, data)

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_writer()
        os.close(self.read_fd)


@pytest.fixture
def stdin(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipe]:
    """``sys.stdin`` replaced by the read end of a pipe the test writes to."""
    monkeypatch.delenv("CLI_INPUT_PATH", raising=False)
    pipe = Pipe()
    stream = open(pipe.read_fd, "rb", closefd=False)  # noqa: SIM115 - closed below
    monkeypatch.setattr("sys.stdin", stream)
    yield pipe
    stream.close()
    pipe.close()


def recording() -> RecordingContext:
    return RecordingContext(declared={"stdin_message"})


async def run_to_end(ctx: RecordingContext) -> list[ConnectorEvent]:
    """Run until end of input (bounded), and return every event emitted."""
    async with asyncio.timeout(WAIT):
        await run(ctx)
    events = []
    while not ctx.events.empty():
        events.append(ctx.events.get_nowait())
    return events


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cli-connector-input"]


async def test_plain_lines_until_end_of_input(stdin: Pipe) -> None:
    stdin.write(b"hello\n\n   \nsecond line\r\nno newline at the end")
    stdin.close_writer()
    events = await run_to_end(recording())
    assert events == [
        ConnectorEvent("stdin_message", TextMessage("hello"), "cli:0"),
        ConnectorEvent("stdin_message", TextMessage("second line"), "cli:3"),
        ConnectorEvent("stdin_message", TextMessage("no newline at the end"), "cli:4"),
    ]


async def test_json_lines(stdin: Pipe) -> None:
    stdin.write(
        b'{"text": "hi", "instanceKey": "u42", "properties": {"user": "ann", "n": 2, "ok": true}}\n'
        b'{"event": "stdin_message", "message": "via message"}\n'
        b'{"name": "stdin_message"}\n'
        b'["not", "an", "object"]\n'
        b"{not json\n"
    )
    stdin.close_writer()
    events = await run_to_end(recording())
    assert [(e.text(), e.instance_key, dict(e.properties)) for e in events] == [
        ("hi", "u42", {"user": "ann"}),
        ("via message", "cli:1", {}),
        ('{"name": "stdin_message"}', "cli:2", {}),
        ('["not", "an", "object"]', "cli:3", {}),
        ("{not json", "cli:4", {}),
    ]


def test_line_event_reads_every_alias() -> None:
    event = line_event('{"name": "deploy", "message": "go", "instanceKey": "ops"}', 9)
    assert event == ConnectorEvent("deploy", TextMessage("go"), "ops", {})
    assert line_event("  ", 0) is None
    blank_key = line_event('{"text": "x", "instanceKey": "  "}', 5)
    assert blank_key is not None
    assert blank_key.instance_key == "cli:5"


async def test_an_undeclared_event_name_skips_the_line(stdin: Pipe) -> None:
    stdin.write(b'{"name": "nope", "text": "x"}\nafter\n')
    stdin.close_writer()
    ctx = LoggingContext(declared={"stdin_message"})
    async with asyncio.timeout(WAIT):
        await run(ctx)
    assert (await ctx.next_event(WAIT)).text() == "after"
    assert ctx.events.empty()
    assert ctx.log.named("cli line skipped")[0]["line_index"] == 0


async def test_lines_arrive_as_they_are_written(stdin: Pipe) -> None:
    ctx = recording()
    async with running(run, ctx) as task:
        stdin.write(b"one\n")
        assert (await ctx.next_event(WAIT)).text() == "one"
        stdin.write(b"tw")
        stdin.write(b"o\nthree\n")
        assert (await ctx.next_event(WAIT)).text() == "two"
        assert (await ctx.next_event(WAIT)).text() == "three"
        assert not task.done()
        stdin.close_writer()
        async with asyncio.timeout(WAIT):
            await task
    assert task.exception() is None


async def test_cancel_while_waiting_for_input(stdin: Pipe) -> None:
    ctx = recording()
    async with running(run, ctx) as task:
        stdin.write(b"first\n")
        await ctx.next_event(WAIT)  # the reader thread is now waiting on an open, silent pipe
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_SECONDS)  # the bound: a loaded machine too
        assert task.cancelled()
    for thread in reader_threads():
        thread.join(timeout=STOP_SECONDS)
    assert reader_threads() == []
    assert os.get_blocking(stdin.read_fd)  # the shared descriptor was left as it was


async def test_cancel_while_emit_waits(stdin: Pipe) -> None:
    ctx = RecordingContext(declared={"stdin_message"}, capacity=1)
    async with running(run, ctx) as task:
        stdin.write(b"a\nb\nc\nd\n")
        assert (await ctx.next_event(WAIT)).text() == "a"
        assert (await ctx.next_event(WAIT)).text() == "b"
        assert not task.done()  # "c" fills the queue, "d" waits in emit: cancelled there
    for thread in reader_threads():
        thread.join(timeout=STOP_SECONDS)
    assert reader_threads() == []


async def test_the_loop_is_not_blocked_while_reading(stdin: Pipe) -> None:
    ctx = recording()
    async with running(run, ctx):
        ticks = 0
        for _ in range(50):  # the loop keeps turning while the connector waits for input
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 50
        stdin.write(b"late\n")
        assert (await ctx.next_event(WAIT)).text() == "late"


async def test_input_from_a_configured_path(tmp_path: Path) -> None:
    source = tmp_path / "input.txt"
    source.write_text('from a file\n{"text": "json too"}\n')
    ctx = RecordingContext(config={"path": str(source)}, declared={"stdin_message"})
    events = await run_to_end(ctx)
    assert [e.text() for e in events] == ["from a file", "json too"]


async def test_input_from_the_environment_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "input.txt"
    source.write_bytes(b"caf\xc3\xa9 \xff\n")
    monkeypatch.setenv("CLI_INPUT_PATH", str(source))
    events = await run_to_end(recording())
    assert [e.text() for e in events] == ["café \ufffd"]


async def test_a_missing_path_is_a_config_error(tmp_path: Path) -> None:
    ctx = RecordingContext(config={"path": str(tmp_path / "absent")})
    with pytest.raises(ConnectorError, match="cannot open input") as raised:
        await run(ctx)
    assert raised.value.code == "E_CONNECTOR_CONFIG"


async def test_stdin_without_a_descriptor_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CLI_INPUT_PATH", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    with pytest.raises(ConnectorError, match="no file descriptor"):
        await run(recording())
