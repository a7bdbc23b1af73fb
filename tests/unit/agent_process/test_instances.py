"""Instances: FIFO per instance, concurrency across instances, files on disk."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_process.conversation import ConversationStore
from agent_process.instances import InstanceManager, instance_dir_name
from agent_process.storage import LocalFiles
from agent_process.turn import TurnInput, TurnResult
from goondan.usage import Usage
from tools_base import Message


class RecordingRunner:
    """A stand-in Turn runner that records order and can be held open."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def run(
        self,
        key: str,
        store: ConversationStore,
        workdir: Path,
        turn_input: TurnInput,
        *,
        usage: Usage | None = None,
        workdir_pin: object = None,
        cancellation: object = None,
    ) -> TurnResult:
        self.started.append((key, turn_input.text))
        gate = self.gates.get(turn_input.text)
        if gate is not None:
            await gate.wait()
        return TurnResult(
            turn_id="t",
            trace_id=turn_input.trace_id,
            status="ok",
            text=f"{key}:{turn_input.text}",
            finish_reason="text_response",
            step_count=1,
            duration_ms=0,
        )


def manager(tmp_path: Path, runner: Any, **kwargs: Any) -> InstanceManager:
    return InstanceManager("agent-a", tmp_path, runner, **kwargs)


async def test_turns_of_one_instance_run_in_order(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.gates["first"] = asyncio.Event()
    instances = manager(tmp_path, runner)
    first = instances.submit("default", TurnInput(text="first"))
    second = instances.submit("default", TurnInput(text="second"))
    await asyncio.sleep(0)
    assert runner.started == [("default", "first")]  # second waits behind first
    runner.gates["first"].set()
    results = await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
    assert [r.text for r in results] == ["default:first", "default:second"]


async def test_different_instances_run_concurrently(tmp_path: Path) -> None:
    runner = RecordingRunner()
    runner.gates["hold"] = asyncio.Event()
    instances = manager(tmp_path, runner)
    held = instances.submit("a", TurnInput(text="hold"))
    other = instances.submit("b", TurnInput(text="go"))
    assert (await asyncio.wait_for(other, timeout=5)).text == "b:go"
    assert not held.done()
    runner.gates["hold"].set()
    await asyncio.wait_for(held, timeout=5)


async def test_queue_limit_is_a_structured_refusal(tmp_path: Path) -> None:
    from agent_process.instances import InstanceQueueFull

    runner = RecordingRunner()
    runner.gates["hold"] = asyncio.Event()
    instances = manager(tmp_path, runner, max_queued=1)
    instances.submit("k", TurnInput(text="hold"))
    await asyncio.sleep(0)
    instances.submit("k", TurnInput(text="queued"))
    with pytest.raises(InstanceQueueFull) as refused:
        instances.submit("k", TurnInput(text="overflow"))
    assert refused.value.code == "E_INSTANCE_QUEUE_FULL"
    runner.gates["hold"].set()
    await asyncio.wait_for(instances.drain(), timeout=5)


async def test_each_instance_has_its_own_directory_and_workdir(tmp_path: Path) -> None:
    instances = manager(tmp_path, RecordingRunner())
    a, b = instances.get("default"), instances.get("user/42")
    assert a.workdir != b.workdir
    assert a.workdir.is_dir()
    assert b.workdir.is_dir()
    metadata = json.loads((b.directory / "metadata.json").read_text())
    assert (metadata["agentName"], metadata["instanceKey"], metadata["status"]) == (
        "agent-a",
        "user/42",
        "idle",
    )


def test_a_new_instance_looks_for_no_file_and_an_existing_one_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goondan.state_files import conversation as files
    from goondan.state_files import metadata as metadata_file

    opened: list[str] = []
    read_base, read_metadata = files.read_base, metadata_file.read_metadata

    def base_seen(path: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(path.name)
        return read_base(path, *args, **kwargs)

    def metadata_seen(directory: Path) -> dict[str, object]:
        opened.append(directory.name)
        return read_metadata(directory)

    monkeypatch.setattr(files, "read_base", base_seen)
    monkeypatch.setattr(metadata_file, "read_metadata", metadata_seen)
    first = manager(tmp_path, RecordingRunner())
    instance = first.get("fresh")
    assert instance.store.messages == []
    # only the older naming's directory is looked for (a key may have files under it)
    assert files.BASE_FILE not in opened
    assert instance_dir_name("fresh") not in opened
    instance.store.append(Message(id="m1", role="user", content="hi"))

    again = manager(tmp_path, RecordingRunner()).get("fresh")
    assert [m.id for m in again.store.messages] == ["m1"]  # its events, read back
    assert files.BASE_FILE in opened
    assert instance_dir_name("fresh") in opened


def test_directory_names_are_safe_and_distinct() -> None:
    assert instance_dir_name("default") == "default"
    assert "/" not in instance_dir_name("a/b")
    assert instance_dir_name("a/b") != instance_dir_name("a:b")
    assert instance_dir_name("../..") not in ("..", ".", "")


def test_directory_names_are_injective_across_spellings() -> None:
    keys = ["tenant/alice", "tenant-alice", "tenant:alice", "a" * 97, "a" * 96, ".", "-x", "x+y"]
    names = [instance_dir_name(k) for k in keys]
    assert len(set(names)) == len(names)
    # A derived name is never a key's own name, so no key can be spelled like it.
    for key, name in zip(keys, names, strict=True):
        if name != key:
            assert instance_dir_name(name) != name


def test_a_directory_recording_another_key_is_refused(tmp_path: Path) -> None:
    from agent_process.instances import InstanceKeyConflict

    instances = manager(tmp_path, RecordingRunner())
    owner = instances.get("owner")
    metadata = json.loads((owner.directory / "metadata.json").read_text())
    other = owner.directory.parent / "intruder"
    other.mkdir()
    (other / "metadata.json").write_text(json.dumps({**metadata, "instanceKey": "owner"}))
    fresh = manager(tmp_path, RecordingRunner())
    with pytest.raises(InstanceKeyConflict) as refused:
        fresh.get("intruder")
    assert refused.value.code == "E_INSTANCE_KEY_CONFLICT"
    assert "owner" in str(refused.value)


def test_a_directory_of_the_older_naming_is_moved_to_its_new_name(tmp_path: Path) -> None:
    import hashlib

    key = "user/7"
    root = tmp_path / "agents" / "agent-a" / "instances"
    legacy = root / f"user-7-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    (legacy / "conversation").mkdir(parents=True)
    (legacy / "metadata.json").write_text(json.dumps({"instanceKey": key}))
    (legacy / "conversation" / "keep.txt").write_text("kept")
    instance = manager(tmp_path, RecordingRunner()).get(key)
    assert instance.directory.name == instance_dir_name(key)
    assert (instance.directory / "conversation" / "keep.txt").read_text() == "kept"
    assert not legacy.exists()


def test_metadata_carries_its_format_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    from agent_process.conversation import ConversationUnreadable
    from orchestrator.state_dir import list_instances

    written = manager(tmp_path, RecordingRunner()).get("default")
    assert json.loads((written.directory / "metadata.json").read_text())["formatVersion"] == 1

    newer = tmp_path / "agents" / "agent-a" / "instances" / instance_dir_name("later")
    newer.mkdir(parents=True)
    (newer / "metadata.json").write_text(
        json.dumps({"formatVersion": 7, "instanceKey": "later", "shape": "unknown"})
    )
    with pytest.raises(ConversationUnreadable, match="metadata format 7") as refused:
        manager(tmp_path, RecordingRunner()).get("later")
    assert refused.value.code == "E_CONVERSATION_UNREADABLE"
    rows = {row.get("instanceKey"): row for row in list_instances(tmp_path)}
    assert rows["default"]["formatVersion"] == 1
    assert "metadata format 7; this runtime reads up to 1: upgrade goondan" in rows[None]["error"]


class SeenRecords:
    """A record mirror that keeps every metadata record the agent wrote, in order."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, object]] = []

    def written(self, path: Path, data: bytes) -> None:
        if path.name == "metadata.json":
            self.metadata.append(json.loads(data))

    def removed(self, path: Path) -> None:
        pass

    def instance_removed(self, directory: Path) -> None:
        pass


class MirroredFiles(LocalFiles):
    def __init__(self, seen: SeenRecords) -> None:
        super().__init__()
        self.records = seen


async def test_a_new_instance_is_recorded_once_as_its_turn_starts(tmp_path: Path) -> None:
    # Not "idle" at its load and then "processing" a moment later: one record, made in place.
    seen = SeenRecords()
    runner = RecordingRunner()
    runner.gates["hold"] = asyncio.Event()
    instances = manager(tmp_path, runner, storage=MirroredFiles(seen))
    turn = instances.admit("fresh", TurnInput(text="hold"))
    assert [record["status"] for record in seen.metadata] == ["processing"]
    directory = instances.get("fresh").directory
    assert json.loads((directory / "metadata.json").read_text())["status"] == "processing"
    runner.gates["hold"].set()
    await asyncio.wait_for(turn, timeout=5)
    await asyncio.wait_for(instances.drain(), timeout=5)
    assert [record["status"] for record in seen.metadata] == ["processing", "idle"]
    assert sorted(path.name for path in directory.iterdir()) == [
        "conversation",
        "metadata.json",
        "workspace",
    ]


async def test_an_instance_whose_only_turn_never_ran_is_recorded_idle(tmp_path: Path) -> None:
    seen = SeenRecords()
    instances = manager(tmp_path, RecordingRunner(), storage=MirroredFiles(seen))
    instances.admit("fresh", TurnInput(text="never")).cancel()  # its caller gave up at once
    await asyncio.wait_for(instances.drain(), timeout=5)
    assert [record["status"] for record in seen.metadata] == ["processing", "idle"]
    assert instances.is_idle("fresh")


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths ``os.fsync`` is given, in order, from now on."""
    paths: list[Path] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        paths.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return paths


async def test_a_new_instance_reaches_the_disk_with_its_first_turns_end_record(
    tmp_path: Path, synced: list[Path]
) -> None:
    # Made for a Turn, its record is left to writeback (a power cut loses it with the Turn the
    # request brings again); the Turn's end record forces the file and the instance directory,
    # whose entries hold metadata.json and conversation/.
    runner = RecordingRunner()
    runner.gates["hold"] = asyncio.Event()
    instances = manager(tmp_path, runner)
    turn = instances.admit("fresh", TurnInput(text="hold"))
    directory = instances.get("fresh").directory
    assert (directory / "metadata.json").exists()
    assert synced == []
    runner.gates["hold"].set()
    await asyncio.wait_for(turn, timeout=5)
    await asyncio.wait_for(instances.drain(), timeout=5)
    assert synced[-1] == directory
    assert json.loads((directory / "metadata.json").read_text())["status"] == "idle"
    assert any(path.parent == directory and ".metadata.json." in path.name for path in synced)


def test_an_instance_made_outside_a_turn_is_forced_to_disk_at_once(
    tmp_path: Path, synced: list[Path]
) -> None:
    instances = manager(tmp_path, RecordingRunner())
    directory = instances.get("read-only").directory
    assert synced == [directory / "metadata.json", directory]
