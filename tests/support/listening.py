"""Daemons listening on loopback TCP, for real HTTP clients (and browsers) to reach: as a
process with no token, as the README's first walkthrough runs one, or in the test's own event
loop with a token (:func:`serving`), as the front doors' tests drive it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2

from orchestrator.daemon import Orchestrator
from tests.support.daemon import Daemon
from tests.support.studio import EXAMPLE
from tests.support.swarm import started


def listening(directory: Path, bundle: str | None = None) -> tuple[Daemon, str]:
    """A daemon in ``directory`` on a free loopback port, ready: ``(daemon, API base URL)``.
    It runs ``bundle`` (a file in ``directory``), else the test swarm."""
    daemon = Daemon(directory, bundle=bundle, args=["--listen", "127.0.0.1:0"])
    try:
        port = daemon.wait_for("http api listening")["port"]
        daemon.wait_for("orchestrator started")
    except BaseException:
        daemon.stop()
        raise
    return daemon, f"http://127.0.0.1:{port}"


def listening_example(directory: Path, api_policy: str = "") -> tuple[Daemon, str]:
    """The offline example swarm (a coordinator, and a worker that writes files) as
    :func:`listening`; ``api_policy``: the Swarm's ``policy.api`` (YAML flow)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = EXAMPLE.read_text()
    if api_policy:
        policy = "  policy:\n    maxStepsPerTurn: 8\n"
        assert text.count(policy) == 1, "the example's Swarm changed"
        text = text.replace(policy, f"{policy}    api: {api_policy}\n")
    (directory / "goondan.yaml").write_text(text)
    return listening(directory, "goondan.yaml")


def instance_keys(http: httpx2.Client, agent: str) -> list[str]:
    """The conversation instances of ``agent`` on disk, sorted."""
    listed = http.get("/v1/instances", params={"agent": agent})
    assert listed.status_code == 200, listed.text
    return sorted(row["instanceKey"] for row in listed.json()["instances"])


def agent_row(http: httpx2.Client, agent: str) -> dict[str, object]:
    """``agent``'s status row."""
    rows = {row["agent"]: row for row in http.get("/v1/agents").json()["agents"]}
    row: dict[str, object] = rows[agent]
    return row


def workspace_files(directory: Path, name: str) -> list[Path]:
    """Every file called ``name`` under ``directory`` (the state's workspaces included)."""
    return sorted(directory.rglob(name))


@asynccontextmanager
async def serving(bundle: Path, token: str | None) -> AsyncIterator[Orchestrator]:
    """The swarm of ``bundle`` running in this event loop (its state beside it), its API on a
    free loopback port wanting ``token``; shut down when the block ends."""
    async with started(
        Orchestrator.from_bundle(
            bundle, state_dir=bundle.parent / "state", api_listen="127.0.0.1:0", api_token=token
        )
    ) as orchestrator:
        yield orchestrator


def tcp_url(orchestrator: Orchestrator) -> str:
    """``http://127.0.0.1:PORT`` of a running swarm's TCP listener."""
    assert orchestrator.api is not None
    assert orchestrator.api.port
    return f"http://127.0.0.1:{orchestrator.api.port}"
