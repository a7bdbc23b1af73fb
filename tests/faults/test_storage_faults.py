"""A full or read-only disk, and conversations that cannot be read: every caller is answered at
once with a structured error, the agent keeps serving, nothing on disk is lost or torn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.swarm import running_swarm

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)"),
]

ANSWER_BOUND_SECONDS = 10  # far below the 60 s request timeout a lost answer would cost


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs as the state directory."""
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(state)], check=True
    )
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


@pytest.fixture
async def swarm(small_disk: Path) -> AsyncIterator[Orchestrator]:
    async with running_swarm(small_disk.parent) as orchestrator:
        yield orchestrator


async def ask(swarm: Orchestrator, text: str, key: str = "k") -> DelegateAnswer:
    async with asyncio.timeout(ANSWER_BOUND_SECONDS):
        return await swarm.request(text, agent="beta", instance_key=key)


def recorded_idle(agent_dir: Path, key: str) -> None:
    """Wait (at most 10 s) until the instance ``key``'s metadata.json says ``idle`` after a
    Turn: with the usage of its model call (the record made when it was loaded has none)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for path in agent_dir.glob("instances/*/metadata.json"):
            with contextlib.suppress(OSError, ValueError):  # replaced while read
                data = json.loads(path.read_text())
                done = data.get("status") == "idle" and data.get("usage")
                if data.get("instanceKey") == key and done:
                    return
        time.sleep(0.01)
    raise AssertionError(f"instance {key!r} was never recorded idle")


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:  # the last partial block
                out.write(b"\0")
    return filler


def conversation_lines(swarm: Orchestrator, key: str) -> list[dict[str, Any]]:
    directory = swarm.state_dir / "agents" / "beta" / "instances" / key / "conversation"
    lines = []
    for name in ("base.jsonl", "events.jsonl"):
        path = directory / name
        if path.exists():
            lines += [json.loads(line) for line in path.read_text().splitlines() if line]
    return lines  # json.loads fails the test on any torn line


def leftovers(state: Path) -> list[Path]:
    return [p for p in state.rglob("*") if p.name.endswith(".tmp")]


async def no_leftovers(state: Path) -> list[Path]:
    """Temporary files that stay: an instance's status record is written by a thread of its own
    within a moment of a Turn's end, and its temporary file exists while it is written (or
    refused by a full disk), so a left-behind file is one still there after that."""
    for _ in range(250):  # up to 5 s; the file system gives no event to wait on
        if not (found := leftovers(state)):
            return found
        await asyncio.sleep(0.02)
    return leftovers(state)


async def test_a_full_disk_answers_at_once_and_the_agent_serves_again_after(
    swarm: Orchestrator, small_disk: Path
) -> None:
    assert (await ask(swarm, "first words")).output == "beta got: first words"
    filler = fill(small_disk)
    # Longer than a page: a line that fits the room left in a file's last page is written,
    # full disk or not (the first Turn's fold leaves events.jsonl's page partly used).
    padding = " " + "x" * 8192
    for attempt in range(3):  # not just once: the agent must not be left half-alive
        answer = await ask(swarm, f"while full {attempt}{padding}")
        assert answer.status == "error", answer
        assert answer.error.code == "E_STORAGE"
        assert "No space left on device" in answer.error.message
        assert str(small_disk) in answer.error.message
    async with asyncio.timeout(ANSWER_BOUND_SECONDS):
        await swarm.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
    assert await no_leftovers(small_disk) == []
    filler.unlink()
    assert (await ask(swarm, "room again")).output == "beta got: room again"
    text = json.dumps(conversation_lines(swarm, "k"))
    assert "first words" in text
    assert "room again" in text
    assert "while full" not in text  # refused, not half-kept
    deleted = await swarm.operations.delete_instance("beta", "k")
    assert deleted.to_wire() == {"ok": True, "deleted": True}


async def test_a_read_only_disk_answers_at_once_then_recovers(
    swarm: Orchestrator, small_disk: Path
) -> None:
    assert (await ask(swarm, "before")).status == "ok"
    # The agent records the instance idle again within 0.2 s of the answer; a remount while
    # that file is open for writing fails "busy", so that record goes first.
    await asyncio.to_thread(recorded_idle, swarm.state_dir / "agents" / "beta", "k")
    # A read-only view of the conversations (the daemon's own open event log keeps the whole
    # file system from being remounted read-only).
    instances = str(swarm.state_dir / "agents" / "beta" / "instances")
    mount("--bind", instances, instances)
    try:
        mount("-o", "remount,bind,ro", instances)
        answer = await ask(swarm, "read only")
        other = await ask(swarm, "new instance", key="fresh")
    finally:
        unmount(instances)
    for refused in (answer, other):
        assert refused.status == "error", refused
        assert refused.error.code == "E_STORAGE"
        assert os.strerror(errno.EROFS) in refused.error.message
    assert (await ask(swarm, "after")).output == "beta got: after"
    assert (await ask(swarm, "new instance", key="fresh")).status == "ok"
    text = json.dumps(conversation_lines(swarm, "k"))
    assert "before" in text
    assert "after" in text


async def test_an_unreadable_conversation_is_named_and_others_are_unaffected(
    swarm: Orchestrator,
) -> None:
    instances = swarm.state_dir / "agents" / "beta" / "instances"
    (instances / "bad" / "conversation" / "events.jsonl").mkdir(parents=True)
    deep = instances / "deep" / "conversation"
    deep.mkdir(parents=True)
    (deep / "events.jsonl").write_text("[" * 200_000 + "\n")
    answer = await ask(swarm, "hello", key="bad")
    assert answer.status == "error", answer
    assert answer.error.code == "E_CONVERSATION_UNREADABLE"
    assert str(instances / "bad" / "conversation" / "events.jsonl") in answer.error.message
    # the unparsable line is skipped with a warning like any malformed line
    assert (await ask(swarm, "hello", key="deep")).output == "beta got: hello"
    assert (await ask(swarm, "hello", key="good")).output == "beta got: hello"
