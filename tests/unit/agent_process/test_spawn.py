"""agents__spawn's cwd, as the target agent judges it: inside the caller's own workspace only.

The caller's instances are made by a real InstanceManager (so their metadata is what a running
agent writes); the checks take nothing from the request but the path and who asked.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from agent_process.instances import InstanceManager
from agent_process.spawn import (
    SpawnRefused,
    caller_workspace,
    check_recorded_workdir,
    spawn_workdir,
)
from agent_process.workdirs import WorkdirNotPinned
from bundle.plan import AgentPlan, ModelPlan
from ipc.protocol import ORCHESTRATOR
from tools_base._pinned import WorkdirRefused


def plan(state: Path, *, allow_outside_state: bool = False) -> AgentPlan:
    return AgentPlan(
        swarm_name="s",
        entry_agent="worker",
        agents=["bank", "worker"],
        agent_name="worker",
        model=ModelPlan(name="m", provider="scripted", model="rules"),
        allow_spawn_outside_state=allow_outside_state,
        state_dir=str(state),
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def worker(state: Path) -> InstanceManager:
    runner: Any = None  # no Turn runs here: only the instances' files matter
    manager = InstanceManager("worker", state, runner)
    for key in ("mallory", "alice"):
        manager.get(key)
    return manager


def workspace(manager: InstanceManager, key: str) -> Path:
    return manager.get(key).workdir


def refused(cwd: str, state: Path, **kwargs: Any) -> str:
    with pytest.raises(SpawnRefused) as info:
        spawn_workdir(cwd, plan(state, **kwargs), "worker", "mallory")
    assert info.value.code == "E_SPAWN_CWD_REFUSED"
    return str(info.value)


def test_a_directory_in_the_callers_workspace_is_made_and_resolved(
    state: Path, worker: InstanceManager
) -> None:
    mine = workspace(worker, "mallory")
    made = spawn_workdir(str(mine / "jobs" / "a"), plan(state), "worker", "mallory")
    assert made == Path(os.path.realpath(mine / "jobs" / "a"))
    assert made.is_dir()
    assert spawn_workdir(str(mine), plan(state), "worker", "mallory") == mine.resolve()
    assert spawn_workdir(None, plan(state), "worker", "mallory") is None


@pytest.mark.parametrize("allow_outside_state", [False, True])
def test_the_state_directory_other_instances_and_their_parents_are_refused(
    state: Path, worker: InstanceManager, allow_outside_state: bool
) -> None:
    mine = workspace(worker, "mallory")
    alice = workspace(worker, "alice")
    escapes = [
        os.path.normpath(mine / "../../../../.."),  # the probe's cwd, as the caller resolves it
        str(state),
        str(state / "agents"),
        str(state / "agents" / "worker" / "instances"),
        str(mine.parent),  # its own conversation and metadata
        str(alice),  # another tenant of the same agent
        str(alice / "sub"),
        str(state / "agents" / "bank" / "instances" / "default" / "workspace"),
        str(state.parent),  # a parent of the state directory
    ]
    for cwd in escapes:
        message = refused(cwd, state, allow_outside_state=allow_outside_state)
        assert "your own workspace" in message, message
    assert not (alice / "sub").exists()
    assert not (state / "agents" / "bank").exists()


def test_symlinks_are_resolved_before_the_check(
    state: Path, worker: InstanceManager, tmp_path: Path
) -> None:
    mine = workspace(worker, "mallory")
    (mine / "up").symlink_to(state, target_is_directory=True)
    (mine / "inside").mkdir()
    (mine / "alias").symlink_to(mine / "inside", target_is_directory=True)
    message = refused(str(mine / "up" / "agents"), state)
    assert f"resolves to {state / 'agents'}" in message
    assert spawn_workdir(str(mine / "alias" / "x"), plan(state), "worker", "mallory") == (
        mine / "inside" / "x"
    )


def test_outside_the_state_only_with_the_policy(state: Path, worker: InstanceManager) -> None:
    elsewhere = state.parent / "projects" / "repo"
    message = refused(str(elsewhere), state)
    assert "policy.allowSpawnOutsideState" in message
    assert not elsewhere.exists()
    allowed = plan(state, allow_outside_state=True)
    assert spawn_workdir(str(elsewhere), allowed, "worker", "mallory") == elsewhere.resolve()
    assert elsewhere.is_dir()


def test_a_workspace_holding_the_state_directory_lends_no_path_in_it(
    state: Path, tmp_path: Path
) -> None:
    """A caller spawned earlier (with the policy) in the directory that holds the state
    directory may use its workspace, but not the state directory inside it."""
    runner: Any = None
    manager = InstanceManager("worker", state, runner)
    manager.prepare("wide", workdir=tmp_path, spawned_by={"agent": "worker"})
    assert caller_workspace(plan(state), "worker", "wide") == tmp_path.resolve()
    ok = spawn_workdir(str(tmp_path / "jobs"), plan(state), "worker", "wide")
    assert ok == (tmp_path / "jobs").resolve()
    with pytest.raises(SpawnRefused):
        spawn_workdir(str(state / "agents"), plan(state), "worker", "wide")


def test_a_caller_with_no_instance_or_no_agent_has_no_workspace(
    state: Path, worker: InstanceManager
) -> None:
    mine = workspace(worker, "mallory")
    assert caller_workspace(plan(state), "worker", "nobody") is None
    assert caller_workspace(plan(state), ORCHESTRATOR, "mallory") is None
    assert caller_workspace(plan(state), "../worker", "mallory") is None
    for owner, key in (("worker", "nobody"), (ORCHESTRATOR, "mallory"), ("bank", "mallory")):
        with pytest.raises(SpawnRefused):
            spawn_workdir(str(mine / "x"), plan(state), owner, key)
    with pytest.raises(SpawnRefused, match="must be absolute"):
        spawn_workdir("jobs/a", plan(state), "worker", "mallory")


def test_a_symlink_put_on_the_way_after_the_check_is_not_followed(
    state: Path, worker: InstanceManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a program in the caller's workspace could do between the check and the mkdir."""
    import agent_process.spawn as spawn

    mine = workspace(worker, "mallory")
    swapped = mine / "jobs"
    checked = spawn._refusal

    def swap_after_check(*args: Any) -> str | None:
        why = checked(*args)
        swapped.symlink_to(state, target_is_directory=True)
        return why

    monkeypatch.setattr(spawn, "_refusal", swap_after_check)
    with pytest.raises(SpawnRefused, match="changed while it was checked"):
        spawn_workdir(str(mine / "jobs" / "agents" / "evil"), plan(state), "worker", "mallory")
    assert not (state / "agents" / "evil").exists()


def restarted(state: Path) -> InstanceManager:
    """The agent's instances as a new process of it loads them."""
    runner: Any = None
    return InstanceManager(
        "worker",
        state,
        runner,
        check_workdir=functools.partial(check_recorded_workdir, plan(state)),
    )


def test_an_instance_spawned_into_the_state_directory_earlier_does_not_load(
    state: Path, worker: InstanceManager
) -> None:
    """What the old rule let through stays on disk after an upgrade: it must not load."""
    by = {"agent": "worker", "instanceKey": "mallory", "at": "2026-01-01T00:00:00.000Z"}
    worker.prepare("root", workdir=state, spawned_by=by)
    with pytest.raises(SpawnRefused, match="does not load"):
        restarted(state).get("root")
    legit = spawn_workdir(
        str(workspace(worker, "mallory") / "job"), plan(state), "worker", "mallory"
    )
    worker.prepare("job", workdir=legit, spawned_by=by)
    assert restarted(state).get("job").workdir == legit


def test_a_workdir_swapped_for_a_symlink_into_the_state_does_not_load(
    state: Path, worker: InstanceManager
) -> None:
    mine = workspace(worker, "mallory")
    job = spawn_workdir(str(mine / "job"), plan(state), "worker", "mallory")
    assert job is not None
    worker.prepare("job", workdir=job, spawned_by={"agent": "worker", "instanceKey": "mallory"})
    job.rmdir()
    job.symlink_to(state, target_is_directory=True)  # what a program in mallory's workspace can do
    with pytest.raises(SpawnRefused, match=f"resolves to {state}"):
        restarted(state).get("job")


def test_a_workdir_swapped_for_a_symlink_to_any_host_folder_does_not_load(
    state: Path, worker: InstanceManager, tmp_path: Path
) -> None:
    """The rules above let a link to a folder outside the state directory through; the pin
    does not: no symlink is followed below the state directory."""
    mine = workspace(worker, "mallory")
    job = spawn_workdir(str(mine / "job"), plan(state), "worker", "mallory")
    assert job is not None
    worker.prepare("job", workdir=job, spawned_by={"agent": "worker", "instanceKey": "mallory"})
    outside = tmp_path / "host-folder"
    outside.mkdir()
    job.rmdir()
    job.symlink_to(outside)
    with pytest.raises(WorkdirNotPinned, match="symlink") as info:
        restarted(state).get("job")
    assert info.value.code == "E_SPAWN_CWD_REFUSED"
    assert list(outside.iterdir()) == []


def test_a_loaded_instance_holds_its_workdir_pinned_until_unloaded(
    state: Path, worker: InstanceManager
) -> None:
    mine = workspace(worker, "mallory")
    job = spawn_workdir(str(mine / "job"), plan(state), "worker", "mallory")
    assert job is not None
    loaded, _ = worker.prepare(
        "job", workdir=job, spawned_by={"agent": "worker", "instanceKey": "mallory"}
    )
    pin = loaded.pin
    assert pin is not None
    assert pin.path == str(job)
    pin.verify()
    job.rename(mine / "job.old")
    job.symlink_to(state, target_is_directory=True)
    with pytest.raises(WorkdirRefused):
        pin.verify()  # what every tool call of the loaded instance does first
    assert worker.forget("job")
    assert pin.closed


def test_a_spawner_whose_workdir_was_swapped_lends_nothing_it_points_at(
    state: Path, worker: InstanceManager
) -> None:
    """The second step of the attack: the swapped instance spawns again, into the state
    directory its workdir now points at (it would be "its own workspace" by the link)."""
    mine = workspace(worker, "mallory")
    job = spawn_workdir(str(mine / "job"), plan(state), "worker", "mallory")
    assert job is not None
    worker.prepare("job", workdir=job, spawned_by={"agent": "worker", "instanceKey": "mallory"})
    job.rename(mine / "job.old")
    job.symlink_to(state, target_is_directory=True)
    assert caller_workspace(plan(state), "worker", "job") is None
    alice = state / "agents" / "worker" / "instances" / "alice" / "workspace"
    with pytest.raises(SpawnRefused):
        spawn_workdir(str(alice), plan(state), "worker", "job")
