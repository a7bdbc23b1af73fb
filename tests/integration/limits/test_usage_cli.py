"""``usage`` over a real handoff: the trace's root, from the daemon and from the disk.

The example swarm's coordinator hands its work to the worker (no limits, no trace budget, so
usage is counted from the event log's Steps); the command line runs as a real process, first
against the running daemon, then with no daemon at all.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.daemon import Orchestrator
from tests.support.daemon import run_cli
from tests.support.usage import metadata_usage

pytestmark = pytest.mark.timeout(120)

EXAMPLE = Path(__file__).resolve().parents[3] / "goondan.yaml.example"


def figures(report: dict[str, Any]) -> dict[str, Any]:
    """What the daemon and the disk must agree on (pools are the daemon's live state)."""
    return {key: report[key] for key in ("total", "agents", "instances", "traces")}


async def test_a_handoff_traces_root_is_the_agent_it_entered_at_with_or_without_a_daemon(
    tmp_path: Path,
) -> None:
    config = tmp_path / "goondan.yaml"
    shutil.copy(EXAMPLE, config)
    state = tmp_path / "state"
    orchestrator = Orchestrator.from_bundle(config, state_dir=state)
    await orchestrator.start()
    try:
        answer = await orchestrator.request("write notes.txt hello world")
        # Each agent writes its instance's lasting usage within 0.2 s of the call (a file of
        # another process: nothing to await but the file itself).
        for agent in ("coordinator", "worker"):
            await asyncio.to_thread(metadata_usage, state, agent, calls=2)
        live_json = await asyncio.to_thread(
            run_cli, "usage", "--state-dir", str(state), "--json", cwd=tmp_path
        )
        live_text = await asyncio.to_thread(
            run_cli, "usage", "--state-dir", str(state), cwd=tmp_path
        )
    finally:
        await orchestrator.shutdown()
    assert answer.ok, answer
    trace_id = (answer.turn or {}).get("traceId")
    assert live_json.returncode == 0, live_json.stderr
    live = json.loads(live_json.stdout)
    [trace] = live["traces"]
    assert (trace["traceId"], trace["root"]) == (trace_id, "coordinator")
    assert trace["agents"] == ["coordinator", "worker"]
    [row] = [line for line in live_text.stdout.splitlines() if line.startswith(str(trace_id))]
    assert row.split()[1] == "coordinator"
    assert live_text.stdout.startswith("since start: 4 model calls")

    # No daemon now: the same report, read back from the state directory.
    disk_json = run_cli("usage", "--state-dir", str(state), "--json", cwd=tmp_path)
    disk_text = run_cli("usage", "--state-dir", str(state), cwd=tmp_path)
    one = run_cli("usage", "--state-dir", str(state), "--trace", str(trace_id), cwd=tmp_path)
    unknown = run_cli("usage", "--state-dir", str(state), "--trace", "nope", cwd=tmp_path)
    assert disk_json.returncode == 0, disk_json.stderr
    disk = json.loads(disk_json.stdout)
    assert figures(disk) == figures(live)
    assert disk["source"] == "eventLog"
    assert disk_text.returncode == 0, disk_text.stderr
    assert disk_text.stdout.startswith("in the event log (no daemon running): 4 model calls")
    [row] = [line for line in disk_text.stdout.splitlines() if line.startswith(str(trace_id))]
    assert row.split()[1] == "coordinator"
    assert one.returncode == 0, one.stderr
    assert f"trace {trace_id} (entered at coordinator)" in one.stdout
    assert unknown.returncode == 1
    assert "no usage recorded for trace 'nope'" in unknown.stderr
