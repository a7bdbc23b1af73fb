"""The inbox of an instance (background completions, async answers, send reports) is bounded."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from agent_process.main import AgentProcess
from bundle import load_bundle
from goondan.defaults import MAX_INBOX_PER_INSTANCE

ROOT = Path(__file__).resolve().parents[3]


def test_an_overflowing_inbox_drops_with_a_clear_error(tmp_path: Path) -> None:
    plan = load_bundle(ROOT / "goondan.yaml.example").agent_plan("worker", tmp_path)
    process = AgentProcess(plan)
    with capture_logs() as logs:
        for n in range(MAX_INBOX_PER_INSTANCE + 3):
            process.inbox.deliver("k", {"type": "tool_completion", "n": n}, "tool_completion")
    assert MAX_INBOX_PER_INSTANCE == 256
    assert len(process.inbox.messages["k"]) == MAX_INBOX_PER_INSTANCE
    dropped = [log for log in logs if log.get("code") == "E_INBOX_FULL"]
    assert len(dropped) == 3
    assert dropped[0]["log_level"] == "error"
    assert '"n": 0' in process.inbox.messages["k"][0].content  # the oldest are kept, in order
