"""``run --watch``: a valid edit restarts only the changed agent; a broken edit changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from orchestrator.watch import Watcher
from tests.support.swarm import write_swarm

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Orchestrator, Watcher, Path]]:
    path = write_swarm(tmp_path)
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    async with asyncio.timeout(30):
        await orchestrator.start()
        await orchestrator.supervisor.ensure_running("beta")
    watcher = Watcher(orchestrator, interval=0.1)
    orchestrator.start_soon(watcher.run(), "watch")
    yield orchestrator, watcher, path
    async with asyncio.timeout(60):
        await orchestrator.shutdown()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


async def test_an_edit_restarts_only_the_changed_agent(
    watched: tuple[Orchestrator, Watcher, Path],
) -> None:
    orchestrator, watcher, path = watched
    alpha_pid = orchestrator.supervisor.handle("alpha").pid
    beta_pid = orchestrator.supervisor.handle("beta").pid
    edit(path, 'reply: "beta got: {input}"', 'reply: "beta v2: {input}"')
    async with asyncio.timeout(30):
        outcome = await watcher.outcomes.get()
    assert outcome == {"valid": True, "errors": [], "restarted": ["beta"]}
    assert orchestrator.supervisor.handle("alpha").pid == alpha_pid
    assert orchestrator.supervisor.handle("beta").pid != beta_pid
    async with asyncio.timeout(30):
        answer = await orchestrator.request("hi", agent="beta")
    assert answer.output == "beta v2: hi"


async def test_a_broken_edit_keeps_the_old_configuration_running(
    watched: tuple[Orchestrator, Watcher, Path],
) -> None:
    orchestrator, watcher, path = watched
    beta_pid = orchestrator.supervisor.handle("beta").pid
    edit(path, "kind: Swarm", "kind: Swarm\n  broken: [")
    async with asyncio.timeout(30):
        outcome = await watcher.outcomes.get()
    assert outcome["valid"] is False
    assert any("E_CONFIG_PARSE_ERROR" in e for e in outcome["errors"])
    assert orchestrator.supervisor.handle("beta").pid == beta_pid
    async with asyncio.timeout(30):
        answer = await orchestrator.request("still?", agent="beta")
    assert answer.output == "beta got: still?"


BOOM = "def register(api):\n    raise RuntimeError('boom at register')\n"
BETA_TOOLS_END = (
    '    - {ref: {kind: Tool, name: pending, package: "@goondan/base"}}\n    - Tool/fault\n'
)


async def test_an_edit_that_cannot_boot_is_survived_and_its_revert_applied(
    watched: tuple[Orchestrator, Watcher, Path],
) -> None:
    orchestrator, watcher, path = watched
    original = path.read_text()
    (path.parent / "boom.py").write_text(BOOM)
    path.write_text(
        original.replace(BETA_TOOLS_END, BETA_TOOLS_END + "  extensions: [Extension/boom]\n")
        + "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata: {name: boom}\n"
        "spec: {entry: ./boom.py}\n"
    )
    async with asyncio.timeout(60):
        broken = await watcher.outcomes.get()
    assert broken["valid"] is True  # it validates: register() only runs at boot
    beta = orchestrator.supervisor.handle("beta")
    assert beta.boot_error is not None
    assert "boom at register" in beta.boot_error
    path.write_text(original)  # the operator reverts
    async with asyncio.timeout(60):
        reverted = await watcher.outcomes.get()
        assert reverted == {"valid": True, "errors": [], "restarted": ["beta"]}
        await orchestrator.supervisor.wait_for_status("beta", ProcessStatus.IDLE)
        answer = await orchestrator.request("hi", agent="beta")
    assert answer.output == "beta got: hi"


async def test_a_module_that_exits_or_loops_at_import_is_rejected(
    watched: tuple[Orchestrator, Watcher, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, watcher, path = watched
    # The deadline is short only while the module loops: a validation slowed down by a busy
    # machine must not be mistaken for a hung one (the watcher reads it at each validation).
    monkeypatch.setenv("GOONDAN_VALIDATE_TIMEOUT", "30")
    module = path.parent / "fault_tools.py"
    healthy = module.read_text()
    module.write_text(healthy + "\nimport os\n\nos._exit(0)\n")
    async with asyncio.timeout(60):
        exited = await watcher.outcomes.get()
    assert exited["valid"] is False
    assert "without a verdict" in exited["errors"][0]
    monkeypatch.setenv("GOONDAN_VALIDATE_TIMEOUT", "2")
    module.write_text(healthy + "\nwhile True:\n    pass\n")
    async with asyncio.timeout(60):
        looped = await watcher.outcomes.get()
    assert looped["valid"] is False
    assert "did not finish within 2 s" in looped["errors"][0]
    assert not _validators_running(path)
    monkeypatch.setenv("GOONDAN_VALIDATE_TIMEOUT", "30")
    module.write_text(healthy.replace('"slow done"', '"slow done v2"'))
    async with asyncio.timeout(60):
        fixed = await watcher.outcomes.get()
    assert fixed["valid"] is True  # the watcher was not wedged by either


def _validators_running(path: Path) -> bool:
    import os

    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"validate" in command and str(path).encode() in command:
            return True
    return False
