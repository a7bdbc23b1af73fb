"""``run --watch``: apply edits of goondan.yaml (and of tool, extension and prompt files) live;
``self-restart`` applies them through the same path.

On a change, the new configuration is validated first, in a fresh interpreter (so edited tool
modules are really re-imported, and a broken one cannot disturb the daemon). If it is invalid,
the errors are logged and the swarm keeps running on the old configuration. If it is valid,
each agent's plan is rebuilt, and only the agents whose plan changed are restarted gracefully
(their conversations survive). Agents added to the Swarm become available; removed ones stop.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from bundle import Bundle, BundleError, load_bundle
from bundle.plan import AgentPlan, ConnectionPlan
from bundle.scan import bundle_candidates
from goondan.errors import ConfigError
from ipc import ORCHESTRATOR, IpcError
from ipc.runtime_events import ProcessConfigAppliedEvent, ProcessConfigRejectedEvent
from orchestrator.connections import ingress_tables
from orchestrator.eventlog import EventLog
from orchestrator.ingress import UnknownIngressAgent
from orchestrator.remote_agents import RemoteTarget
from orchestrator.supervisor import Supervisor
from orchestrator.validation import validate_timeout


class Orchestrator(Protocol):
    """What a reload reads and changes of the daemon (:class:`orchestrator.daemon.Orchestrator`,
    which reloads through this module, so it is named by this shape)."""

    bundle: Bundle
    """The configuration the swarm runs; a valid reload replaces it."""

    @property
    def bundle_path(self) -> Path:
        """The configuration on disk."""

    @property
    def entry_agent(self) -> str:
        """The Swarm's entry agent."""

    @property
    def grace(self) -> float:
        """How long a restarted agent may take to stop."""

    @property
    def config_lock(self) -> asyncio.Lock:
        """Held while a configuration is checked and adopted."""

    @property
    def events(self) -> EventLog:
        """Where a reload's outcome is recorded."""

    @property
    def supervisor(self) -> Supervisor:
        """The agents' processes."""

    def build_plans(self, bundle: Bundle) -> dict[str, AgentPlan]:
        """Every agent's plan under ``bundle``."""

    def build_connection_plans(self, bundle: Bundle) -> list[ConnectionPlan]:
        """Every Connection's plan under ``bundle``."""

    async def adopt_cluster_bundle(self, bundle: Bundle, plans: dict[str, AgentPlan]) -> list[str]:
        """Hand ``bundle`` to the cluster's nodes; the agents restarted for it."""

    def apply_limits(self, bundle: Bundle) -> None:
        """Adopt ``bundle``'s limits."""

    def build_remote_agents(self, bundle: Bundle) -> dict[str, RemoteTarget]:
        """The swarm's RemoteAgents under ``bundle``, their tokens resolved."""

    def apply_remote_agents(self, targets: dict[str, RemoteTarget]) -> None:
        """Adopt ``targets`` as the swarm's RemoteAgents."""

    async def apply_plans(self, plans: dict[str, AgentPlan]) -> list[str]:
        """Adopt ``plans``; the agents restarted for them."""

    async def apply_connections(self, bundle: Bundle) -> list[str]:
        """Adopt ``bundle``'s Connections; the ones restarted."""


def watched_files(bundle: Bundle) -> set[Path]:
    """The bundle's files (for a bundle directory, every file name it may hold, so a new
    one counts as an edit) and every local file they point at (entries, prompt files)."""
    files = set(bundle.files)
    if bundle.directory is not None:
        files.update(bundle_candidates(bundle.directory))
    for resource in bundle.resources:
        if resource.package is not None:
            continue
        entry = getattr(resource.spec, "entry", None)
        if isinstance(entry, str):
            files.add((resource.base_dir / entry).resolve())
        prompt = getattr(resource.spec, "prompt", None)
        system_ref = getattr(prompt, "system_ref", None)
        if isinstance(system_ref, str):
            files.add((resource.base_dir / system_ref).resolve())
    return files


def _snapshot(files: set[Path]) -> dict[Path, tuple[int, int] | None]:
    out: dict[Path, tuple[int, int] | None] = {}
    for path in files:
        try:
            stat = path.stat()
            out[path] = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            out[path] = None
    return out


class Watcher:
    """Polls the configuration's files and applies valid changes."""

    def __init__(self, orchestrator: Orchestrator, interval: float = 1.0) -> None:
        self.orchestrator = orchestrator
        self.interval = interval
        self.outcomes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        """One entry per change seen: ``{"valid": bool, "restarted": [...], "errors": [...]}``."""
        self.log = structlog.get_logger("goondan.watch")
        self._files = watched_files(orchestrator.bundle)
        self._seen = _snapshot(self._files)

    async def run(self) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            now = _snapshot(self._files)
            if now != self._seen:
                self._seen = now
                try:
                    outcome = await self.apply()
                except Exception as exc:  # the watcher outlives every failure it meets
                    self.log.exception("configuration change failed")
                    outcome = {"valid": False, "errors": [repr(exc)], "restarted": []}
                self.outcomes.put_nowait(outcome)

    async def apply(self) -> dict[str, Any]:
        """Validate the configuration on disk and restart the agents it changed."""
        outcome = await reload_configuration(self.orchestrator)
        if outcome["valid"]:
            self._files = watched_files(self.orchestrator.bundle)
            self._seen = _snapshot(self._files)
        return outcome


@dataclass(frozen=True, slots=True)
class Reload:
    """A configuration read from disk that loads: its bundle and every agent's plan."""

    bundle: Bundle
    plans: dict[str, AgentPlan]
    remote: dict[str, RemoteTarget]
    """Its RemoteAgents, their tokens resolved."""


async def check_configuration(orchestrator: Orchestrator) -> Reload | list[str]:
    """The configuration on disk, validated and planned but not adopted; or its errors."""
    errors = await _validate(orchestrator.bundle_path)
    if errors:
        return errors
    try:
        bundle = load_bundle(orchestrator.bundle_path, check_handlers=False)
        plans = orchestrator.build_plans(bundle)
        ingress_tables(
            bundle,
            orchestrator.build_connection_plans(bundle),
            orchestrator.entry_agent,
            sorted(plans),
        )
        remote = orchestrator.build_remote_agents(bundle)
    except BundleError as exc:  # changed again between the two reads
        return [e.format() for e in exc.errors]
    except UnknownIngressAgent as exc:  # routes to an agent the swarm does not have
        return [str(exc)]
    except ConfigError as exc:  # a RemoteAgent's token is not set
        return [str(exc)]
    return Reload(bundle, plans, remote)


async def reload_configuration(
    orchestrator: Orchestrator, *, restart: str | None = None
) -> dict[str, Any]:
    """Adopt the configuration on disk if it is valid: the agents whose plan changed restart
    with their new plan (conversations survive), new agents become available, removed ones
    stop, Connections follow; ``restart`` (an agent that asked for it) restarts in any case.
    Invalid, it is rejected and nothing changes. ``--watch`` and ``self-restart`` both come
    here, one at a time."""
    log = structlog.get_logger("goondan.watch")
    async with orchestrator.config_lock:
        checked = await check_configuration(orchestrator)
        if not isinstance(checked, Reload):
            for error in checked:
                log.error("configuration change rejected", issue=error)
            orchestrator.events.lifecycle(ProcessConfigRejectedEvent(errors=checked), ORCHESTRATOR)
            return {"valid": False, "errors": checked, "restarted": []}
        bundle, plans = checked.bundle, checked.plans
        orchestrator.bundle = bundle
        restarted = await orchestrator.adopt_cluster_bundle(bundle, plans)
        orchestrator.apply_limits(bundle)
        orchestrator.apply_remote_agents(checked.remote)
        restarted += await orchestrator.apply_plans(plans)
        restarted += await orchestrator.apply_connections(bundle)
        if restart is not None and restart in plans and restart not in restarted:
            restarted.append(restart)
            try:
                await orchestrator.supervisor.restart_agent(restart, orchestrator.grace)
            except (IpcError, TimeoutError) as exc:  # it backs off like any boot failure
                log.error("agent did not start again", agent=restart, error=str(exc))
    log.info("configuration change applied", restarted=restarted)
    orchestrator.events.lifecycle(ProcessConfigAppliedEvent(restarted=restarted), ORCHESTRATOR)
    return {"valid": True, "errors": [], "restarted": restarted}


async def _validate(path: Path) -> list[str]:
    """Every configuration error of ``path``, found by ``validate`` in a fresh interpreter.

    Only an explicit verdict counts: a validator that exits without one (a module that calls
    ``os._exit(0)`` at import) or does not finish in time (one that loops) rejects the change,
    and a validator still running is killed, never left behind.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orchestrator",
        "validate",
        str(path),
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(validate_timeout() + 5):  # the validator's own, plus start-up
            stdout, stderr = await process.communicate()
    except TimeoutError:
        return [f"validation did not finish within {validate_timeout():g} s"]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    try:
        report = json.loads(stdout)
    except ValueError:
        detail = stderr.decode(errors="replace").strip()
        return [detail or "validation ended without a verdict"]
    if report.get("valid") is True:
        return []
    return [
        f"{e.get('file')}:{e.get('line')}: {e.get('resource')}: {e.get('field')}: {e.get('message')} ({e.get('code')})"
        for e in report.get("errors", [])
    ] or ["validation failed"]
