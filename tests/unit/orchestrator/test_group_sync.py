"""The request journal's group commit: every waiter answered after a sync that covers its
line, one sync per file for the waiters queued together, a failure given to its own file's
waiters only, nothing waited for after close."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from orchestrator.requests.group_sync import GroupSync


def opened(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


async def test_waiters_queued_during_a_sync_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_started, release = threading.Event(), threading.Event()
    synced: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        if len(synced) == 1:
            first_started.set()
            release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    group = GroupSync()
    journal = opened(tmp_path / "journal")
    try:
        first = asyncio.ensure_future(group.sync(os.dup(journal), 1))
        assert await asyncio.to_thread(first_started.wait, 10)
        fds = [os.dup(journal) for _ in range(9)]
        rest = [asyncio.ensure_future(group.sync(fd, 1)) for fd in fds]
        await asyncio.sleep(0)  # all nine queued behind the sync in progress
        release.set()
        async with asyncio.timeout(10):
            await asyncio.gather(first, *rest)
        assert len(synced) == 2  # the first alone, then the nine together
        assert all(closed(fd) for fd in fds)
    finally:
        release.set()
        group.close()
        os.close(journal)


async def test_a_failed_sync_fails_its_own_files_waiters_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, sound = opened(tmp_path / "broken"), opened(tmp_path / "sound")
    broken_inode = os.fstat(broken).st_ino
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if os.fstat(fd).st_ino == broken_inode:
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    group = GroupSync()
    try:
        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(
                group.sync(os.dup(broken), "broken"),
                group.sync(os.dup(sound), "sound"),
                return_exceptions=True,
            )
        assert isinstance(outcomes[0], OSError)
        assert outcomes[0].errno == 5
        assert outcomes[1] is None
    finally:
        group.close()
        os.close(broken)
        os.close(sound)


async def test_a_caller_that_gives_up_does_not_stop_the_sync(tmp_path: Path) -> None:
    group = GroupSync()
    journal = opened(tmp_path / "journal")
    try:
        waiting = asyncio.ensure_future(group.sync(os.dup(journal), 1))
        await asyncio.sleep(0)
        waiting.cancel()
        async with asyncio.timeout(10):
            await group.sync(os.dup(journal), 1)  # the thread still answers
    finally:
        group.close()
        os.close(journal)


async def test_nothing_is_waited_for_after_close(tmp_path: Path) -> None:
    group = GroupSync()
    journal = opened(tmp_path / "journal")
    try:
        await group.sync(os.dup(journal), 1)
        group.close()
        fd = os.dup(journal)
        with pytest.raises(OSError, match="closed"):
            await group.sync(fd, 1)
        assert closed(fd)
    finally:
        os.close(journal)
