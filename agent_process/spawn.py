"""Where ``agents__spawn`` may put a new instance's workdir: inside the caller's own workspace.

A spawned instance's tools (``file-system``, ``bash``) are confined to its workdir, so the
workdir is the confinement: a ``cwd`` naming the state directory would hand the new instance
every conversation, workspace and event log of the swarm. The rules, on the path with every
symlink resolved:

* inside the caller's own workspace: allowed (the caller shares what it can already touch);
* the state directory, anything else in it, or a directory that holds it: refused, always;
* anywhere else: refused unless the Swarm's ``policy.allowSpawnOutsideState`` is true.

The target agent's process decides, and not the caller's: the caller's ``agents`` tool resolves
a relative ``cwd`` against its workdir, but any code in the caller's process can send a
``spawn_request`` of its own making, so a check there is a courtesy at best. The Orchestrator
does not read instance layouts (they are the agent processes'). The target gets the caller's
agent as the Orchestrator stamps it (the channel the request came on, not a field the caller
writes), looks that instance's workspace up in the state directory as the instance's own
files record it, and is the process that creates and records the workdir, so the check and the
use are one step; nothing in the request body but the path itself, which is only checked, is
taken on trust. (The caller's instance key is the caller's word: a process could name another
of its own instances, whose workspaces it already serves.)

A workdir is judged again each time its instance loads (:func:`check_recorded_workdir`, given
to the ``InstanceManager``), by the rules that guard other conversations: an instance spawned
into the state directory before these rules, or whose workdir was since swapped for a symlink
into it (a program in the spawner's workspace can do that), does not load. A swap made while the
instance is loaded is caught by its pinned workdir (:mod:`agent_process.workdirs`) at the
next tool call, and a spawner whose own workspace was swapped lends nothing through it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from agent_process.conversation import ConversationStorageError
from agent_process.instance_files import recorded_workdir
from agent_process.workdirs import checked_path
from bundle.plan import AgentPlan
from goondan.errors import DeliveryCode, DeliveryError

_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)


class SpawnRefused(DeliveryError):
    """An ``agents__spawn`` asked for a workdir the rules above do not allow."""

    code = DeliveryCode.E_SPAWN_CWD_REFUSED


def caller_workspace(plan: AgentPlan, owner: str, owner_instance_key: str) -> Path | None:
    """The workspace of the spawning instance, its root resolved; ``None`` when ``owner`` is
    not an agent of the swarm (the Orchestrator itself), has no such instance on disk, or its
    workspace has a symlink on its way (one swapped for a link lends nothing it points at)."""
    if owner not in plan.agents:
        return None
    root = Path(plan.state_dir) / "agents" / owner / "instances"
    workdir = recorded_workdir(root, owner_instance_key)
    return None if workdir is None else checked_path(workdir, Path(plan.state_dir))


def spawn_workdir(
    cwd: str | None, plan: AgentPlan, owner: str, owner_instance_key: str
) -> Path | None:
    """The workdir (resolved, created) that ``owner``'s instance ``owner_instance_key`` asked
    for with ``cwd``, or ``None`` for the default one.

    Raises :class:`SpawnRefused` when the rules refuse it, ``ConversationStorageError`` when
    it cannot be created.
    """
    if not cwd:
        return None
    if not os.path.isabs(cwd):
        raise SpawnRefused(f"cwd {cwd!r} must be absolute (the caller resolves a relative one)")
    real = Path(os.path.realpath(cwd))
    workspace = caller_workspace(plan, owner, owner_instance_key)
    state = Path(os.path.realpath(plan.state_dir))
    why = _refusal(real, state, workspace, plan.allow_spawn_outside_state)
    if why is not None:
        shown = cwd if str(real) == cwd else f"{cwd} (resolves to {real})"
        mine = f" {workspace}" if workspace is not None else ""
        hint = (
            "; an operator can allow paths outside the state directory with the Swarm's "
            "policy.allowSpawnOutsideState"
            if why == _OUTSIDE
            else ""
        )
        raise SpawnRefused(
            f"cwd {shown} {why}; use a directory inside your own workspace{mine}{hint}"
        )
    _make_directory(real, cwd)
    return real


def check_recorded_workdir(
    plan: AgentPlan, workdir: Path, spawned_by: dict[str, object] | None
) -> None:
    """Refuse to load an instance whose workdir chosen at spawn (``workdir``, recorded in its
    metadata) resolves now into the state directory outside its spawner's workspace, or onto a
    parent of the state directory: one spawned so before these rules, or whose directory was
    swapped for a symlink since. Raises :class:`SpawnRefused`.

    Only the rules that guard other conversations apply here: a workdir outside the state
    directory stays usable after the Swarm's ``policy.allowSpawnOutsideState`` is turned off.
    """
    owner = spawned_by.get("agent") if spawned_by is not None else None
    key = spawned_by.get("instanceKey") if spawned_by is not None else None
    workspace = (
        caller_workspace(plan, owner, key)
        if isinstance(owner, str) and isinstance(key, str)
        else None
    )
    real = Path(os.path.realpath(workdir))
    why = _refusal(real, Path(os.path.realpath(plan.state_dir)), workspace, True)
    if why is not None:
        shown = str(workdir) if real == workdir else f"{workdir} (resolves to {real})"
        raise SpawnRefused(
            f"this instance's workdir {shown}, chosen when {owner}/{key} spawned it, {why}; "
            "the instance does not load (delete it with goondan instances delete)"
        )


_OUTSIDE = "is outside the spawning instance's workspace"


def _refusal(
    real: Path, state: Path, workspace: Path | None, allow_outside_state: bool
) -> str | None:
    """Why ``real`` may not be a spawned workdir (``None``: it may)."""
    if real.is_relative_to(state):
        # Only a workspace that itself lies in the state directory lends a path there: a
        # workdir chosen outside it that holds the state directory must not reach into it.
        mine = (
            workspace is not None
            and workspace.is_relative_to(state)
            and real.is_relative_to(workspace)
        )
        return (
            None
            if mine
            else "is in the state directory but not in the spawning instance's workspace"
        )
    if state.is_relative_to(real):
        return "holds the state directory"
    if (workspace is not None and real.is_relative_to(workspace)) or allow_outside_state:
        return None
    return _OUTSIDE


def _make_directory(real: Path, cwd: str) -> None:
    """``mkdir -p`` of the checked path, never following a symlink: one put on the way after
    the check (by a program in the caller's workspace) fails it instead of redirecting it."""
    fd = os.open(real.anchor, _DIR_FLAGS)
    try:
        for part in real.parts[1:]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SpawnRefused(
                f"cwd {cwd} changed while it was checked (a symlink or a file on the way)"
            ) from exc
        raise ConversationStorageError(real, exc) from exc
    finally:
        os.close(fd)
