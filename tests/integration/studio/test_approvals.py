"""Deciding parked tool calls from the studio: a real daemon of the offline example, the studio
as a real process, requests as a hostile page would send them, and the system's Chromium
driven by Playwright as an operator would click.

The example's ``bash__exec`` waits for an operator. The studio hands a decision to the
daemon's own route on ``api.sock``, so the daemon records the studio's process as who decided;
the studio itself only takes decisions from its own page, opened from the link the studio
printed (its session cookie and token), and only on loopback: requests forged by a program
are tried in ``test_sessions.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.daemon import Daemon, run_cli, wait_gone
from tests.support.studio import StudioProcess, agent_rows, example_daemon, watched_page
from tests.support.studio_sessions import approval, park

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
"""Longest any expectation waits for the page (the machine may be busy)."""


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser, height=900) as opened:
        yield opened


@pytest.fixture
def swarm(tmp_path: Path) -> Iterator[tuple[Path, Daemon, StudioProcess]]:
    directory = tmp_path / "swarm"
    daemon = example_daemon(directory)
    studio: StudioProcess | None = None
    try:
        studio = StudioProcess(cwd=directory)
        yield directory, daemon, studio
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()


def test_an_operator_edits_the_arguments_approves_and_reads_the_answer(
    page: Page, swarm: tuple[Path, Daemon, StudioProcess]
) -> None:
    from playwright.sync_api import expect

    directory, _, studio = swarm
    # The worker runs only when first asked: not started, and not "terminated".
    assert agent_rows(directory)["worker"]["status"] == "notStarted"
    page.goto(studio.link + "#/swarm")  # the printed link: this browser may decide
    page.wait_for_url(re.compile(r"/#/swarm$"))  # and the key left the address bar
    assert "key=" not in page.url
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    node = page.locator('a.node[data-agent="worker"]')
    expect(node).to_have_attribute("data-status", "notStarted", timeout=WAIT_MS)
    expect(node).to_contain_text("not started")

    approval_id = park(directory, "echo from the model")
    trace_id = approval(directory, approval_id)["traceId"]
    page.goto(studio.url + f"#/traces/{trace_id}")
    parked = page.locator('li.wf-row[data-kind="approval"]')
    expect(parked).to_have_class(re.compile("outcome-awaiting"), timeout=WAIT_MS)
    expect(parked.locator(".badge")).to_have_text(re.compile("awaiting approval"))
    expect(parked.locator(".span-error")).to_have_count(0)  # parked is no failure
    expect(page.locator(".trace-summary")).to_contain_text("awaiting approval")
    parked.get_by_role("link", name="approve or reject it").click()

    item = page.locator(f'li.approval[data-approval-id="{approval_id}"]')
    expect(item).to_have_attribute("data-status", "pending", timeout=WAIT_MS)
    expect(item.locator(".badge")).to_have_text("awaiting approval")
    editor = item.get_by_label(re.compile("^Arguments"))
    assert json.loads(editor.input_value()) == {"command": "echo from the model"}
    # Invalid JSON is caught on the page, said plainly, and nothing is sent.
    editor.fill('{"command": "echo edited by the operator"')
    item.get_by_role("button", name="Approve").click()
    expect(item.locator(".approval-problem")).to_contain_text("not valid JSON")
    editor.fill('["echo"]')
    item.get_by_role("button", name="Approve").click()
    expect(item.locator(".approval-problem")).to_have_text(
        "Arguments must be a JSON object, not an array"
    )
    assert approval(directory, approval_id)["status"] == "pending"

    editor.fill('{"command": "echo edited by the operator"}')
    item.get_by_role("button", name="Approve").click()
    decided = page.locator(f'li.approval[data-approval-id="{approval_id}"][data-status="approved"]')
    expect(decided.locator(".approval-turn")).to_have_text(
        re.compile(r"^The Turn answered: edited by the operator\s*$"), timeout=WAIT_MS
    )
    expect(decided.locator(".approval-decision")).to_have_text(
        re.compile(
            rf"^approved by uid {os.getuid()} (\(\S+\) )?pid {studio.process.pid} on api\.sock at "
        )
    )
    expect(decided).to_contain_text("edited by the operator")
    recorded = approval(directory, approval_id)
    assert recorded["decidedArguments"] == {"command": "echo edited by the operator"}
    assert recorded["decidedBy"]["pid"] == studio.process.pid
    expect(page.locator('li.approval[data-status="pending"]')).to_have_count(0)

    page.goto(studio.url + f"#/traces/{trace_id}")
    for kind in ("approval", "tool"):  # the wait, decided; then the call, run
        span = page.locator(f'li.wf-row[data-kind="{kind}"][data-name="bash__exec"]')
        expect(span).to_have_class(re.compile("outcome-ok"), timeout=WAIT_MS)
    expect(page.locator(".trace-summary")).not_to_contain_text("awaiting")


def test_an_operator_rejects_with_a_reason_and_a_clean_stop_is_no_crash(
    page: Page, swarm: tuple[Path, Daemon, StudioProcess]
) -> None:
    from playwright.sync_api import expect

    directory, daemon, studio = swarm
    approval_id = park(directory, "rm -rf build")
    # Opened at the bare address, the page shows the call but cannot decide, and says why.
    page.goto(studio.url + f"#/approvals/{approval_id}")
    item = page.locator(f'li.approval[data-approval-id="{approval_id}"]')
    expect(item).to_have_attribute("data-status", "pending", timeout=WAIT_MS)
    expect(item.get_by_role("button", name="Reject")).to_be_disabled()
    expect(page.locator("#view")).to_contain_text("open the link the studio printed")
    page.goto(studio.link + f"#/approvals/{approval_id}")
    expect(item).to_have_attribute("data-status", "pending", timeout=WAIT_MS)
    expect(item.get_by_role("button", name="Reject")).to_be_enabled()
    item.get_by_role("button", name="Reject").click()
    expect(item.locator(".approval-problem")).to_contain_text("Give a reason")
    assert approval(directory, approval_id)["status"] == "pending"
    item.get_by_label("Reason").fill("never delete the build in tests")
    item.get_by_role("button", name="Reject").click()
    decided = page.locator(f'li.approval[data-approval-id="{approval_id}"][data-status="rejected"]')
    expect(decided.locator(".approval-decision")).to_have_text(
        re.compile(r"^rejected by uid \d+ .*on api\.sock at .*: never delete the build in tests$"),
        timeout=WAIT_MS,
    )
    expect(decided.locator(".badge")).to_have_text("rejected")
    expect(decided.locator(".approval-turn")).to_contain_text("The Turn answered:")
    assert approval(directory, approval_id)["reason"] == "never delete the build in tests"

    # A crash, then the daemon stops: every agent exits 0 when asked, which is no crash.
    page.goto(studio.url + "#/swarm")
    node = page.locator('a.node[data-agent="worker"]')
    worker_pid = agent_rows(directory)["worker"]["pid"]
    expect(node).to_have_attribute("data-pid", str(worker_pid), timeout=WAIT_MS)
    os.kill(worker_pid, signal.SIGKILL)
    assert wait_gone(worker_pid)
    expect(node).to_contain_text("signal SIGKILL", timeout=WAIT_MS)
    expect(node).to_have_attribute("data-status", "idle", timeout=WAIT_MS)
    os.kill(daemon.process.pid, signal.SIGTERM)
    assert daemon.process.wait(timeout=60) == 0
    expect(page.locator("#mode")).to_contain_text("after the fact", timeout=WAIT_MS)
    expect(node).to_have_attribute("data-status", "terminated", timeout=WAIT_MS)
    expect(node).not_to_contain_text("crashed")
    page.reload()  # and so it reads after the fact, from the event log
    expect(node).to_have_attribute("data-status", "terminated", timeout=WAIT_MS)
    expect(node).to_contain_text("crashes 1")
    expect(node).not_to_contain_text("crashed")


def test_a_parked_call_awaits_approval_in_the_swarm_and_the_tab_counts_it_live(
    page: Page, swarm: tuple[Path, Daemon, StudioProcess]
) -> None:
    """While a call waits for an operator its agent says so (not ``processing``), and the
    Approvals tab counts the calls waiting, as they come and go, on whichever view."""
    from playwright.sync_api import expect

    directory, _, studio = swarm
    page.goto(studio.url + "#/swarm")
    count = page.locator("#approvals-count")
    node = page.locator('a.node[data-agent="worker"]')
    expect(node).to_have_attribute("data-status", "notStarted", timeout=WAIT_MS)
    expect(count).to_be_hidden()

    approval_id = park(directory, "echo parked")
    expect(node).to_have_attribute("data-status", "awaitingApproval", timeout=WAIT_MS)
    expect(node.locator(".badge")).to_have_text(re.compile("awaiting approval"))
    expect(node).to_contain_text("1 call awaiting approval")
    row = page.locator('table.agents tr[data-agent="worker"]')
    expect(row.locator(".badge")).to_have_text(re.compile("awaiting approval"))
    expect(count).to_have_text("1 pending", timeout=WAIT_MS)
    expect(page.get_by_role("link", name="Approvals 1 pending")).to_be_visible()

    page.goto(studio.url + "#/logs")  # the count is the page's, not the Swarm view's
    expect(count).to_have_text("1 pending")
    decided = run_cli("approve", approval_id, cwd=directory)
    assert decided.returncode == 0, decided.stderr
    expect(count).to_be_hidden(timeout=WAIT_MS)
    said = page.locator('table.logs tr[data-type="approval.decided"] .log-sentence')
    expect(said).to_have_text(
        re.compile(rf"^{approval_id} \(bash__exec\) approved by uid {os.getuid()} .*on api\.sock$"),
        timeout=WAIT_MS,
    )
    page.goto(studio.url + "#/swarm")
    expect(node).to_have_attribute("data-status", "idle", timeout=WAIT_MS)
