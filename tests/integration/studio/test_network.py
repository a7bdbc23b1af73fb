"""The studio's trace view shows the connections a tool call's sandboxed program made through
the network proxy (``network.connection`` events) on the call's span, in a real browser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.studio import StudioProcess, watched_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


def events() -> list[dict[str, Any]]:
    """A bash call whose program reached one host and was refused another, as logged."""

    def of(kind: str, ms: int, span: str, parent: str | None, **fields: Any) -> dict[str, Any]:
        event = {
            "type": kind,
            "timestamp": f"2026-11-23T18:00:00.{ms:03d}Z",
            "agentName": "worker",
            "instanceKey": "default",
            "traceId": TRACE,
            "spanId": span,
        }
        if parent is not None:
            event["parentSpanId"] = parent
        return {**event, **fields}

    call = {"toolCallId": "c1", "toolName": "bash__exec", "stepId": "s0", "turnId": "t1"}
    return [
        of("turn.started", 0, "turn", None, turnId="t1"),
        of("step.started", 5, "s0", "turn", stepIndex=0),
        of("tool.called", 10, "tool", "s0", **call, args={"command": "curl ..."}),
        of("network.connection", 60, "tool", "s0", **call, protocol="connect",
           host="api.example.com", port=443, address="93.184.216.34", allowed=True,
           reason=None, bytesUp=517, bytesDown=4120, duration=40.5),
        of("network.connection", 70, "tool", "s0", **call, protocol="http",
           host="169.254.169.254", port=80, address=None, allowed=False,
           reason="169.254.169.254 is in 169.254.0.0/16, not the public internet",
           bytesUp=0, bytesDown=0, duration=0.0),
        of("tool.completed", 80, "tool", "s0", **call, status="ok", duration=70.0,
           output={"exitCode": 0}, error=None),
        of("step.completed", 90, "s0", "turn", stepIndex=0, duration=85.0),
        of("turn.completed", 95, "turn", None, turnId="t1", duration=95.0),
    ]  # fmt: skip


def test_a_calls_connections_show_on_its_span(page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    state = tmp_path / "state"
    state.mkdir()
    lines = [json.dumps(event) for event in events()]
    (state / "runtime-events.jsonl").write_text("\n".join(lines) + "\n")
    studio = StudioProcess("--state-dir", str(state), cwd=tmp_path)
    try:
        page.goto(studio.url + f"#/traces/{TRACE}")
        marks = page.locator('li.wf-row[data-span-id="tool"] li.wf-mark')
        expect(marks).to_have_count(2, timeout=WAIT_MS)
        expect(marks.first).to_have_attribute("data-type", "network.connection")
        expect(marks.first).to_contain_text(
            "network connect api.example.com:443 → 93.184.216.34, 517 B up, 4,120 B down"
        )
        expect(marks.nth(1)).to_contain_text(
            "network http 169.254.169.254:80 refused: "
            "169.254.169.254 is in 169.254.0.0/16, not the public internet"
        )
        expect(marks.nth(1)).to_have_class("wf-mark mark-net-refused")
        # The Step above has none: they belong to the call.
        expect(page.locator('li.wf-row[data-span-id="s0"] > ul li.wf-mark')).to_have_count(0)

        page.goto(studio.url + "#/logs?type=network.")
        rows = page.locator("table.logs tbody tr")
        expect(rows).to_have_count(2, timeout=WAIT_MS)
        assert rows.evaluate_all("rs => rs.map(r => [r.dataset.type, r.dataset.level])") == [
            ["network.connection", "warning"],  # the refusal, newest first
            ["network.connection", "info"],
        ]
        expect(rows.first.locator(".log-sentence")).to_contain_text("169.254.169.254:80 refused")
    finally:
        assert studio.stop() == 0
