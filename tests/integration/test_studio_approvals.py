"""Deciding parked tool calls from the studio: a real daemon of the offline example, the studio
as a real process, requests as a hostile page would send them, and the system's Chromium
driven by Playwright as an operator would click.

The example's ``bash__exec`` waits for an operator. The studio hands a decision to the
daemon's own route on ``api.sock``, so the daemon records the studio's process as who decided;
the studio itself only takes decisions from its own page (Origin, Content-Type, its CSRF
token) and only on loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.daemon import Daemon, run_cli, wait_gone
from tests.support.studio import (
    StudioProcess,
    agent_rows,
    chromium,
    example_daemon,
    wait_for_approval,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
"""Longest any expectation waits for the page (the machine may be busy)."""


def park(directory: Path, command: str) -> str:
    """Ask the worker to run ``command`` (it parks for approval); the approval's id."""
    sent = run_cli("send", "worker", f"run {command}", "--no-wait", cwd=directory)
    assert sent.returncode == 0, sent.stderr
    return wait_for_approval(directory)


def approval(directory: Path, approval_id: str) -> dict[str, Any]:
    listed = run_cli("approvals", "--all", "--json", cwd=directory)
    assert listed.returncode == 0, listed.stderr
    rows = {row["approvalId"]: row for row in json.loads(listed.stdout)}
    found: dict[str, Any] = rows[approval_id]
    return found


def post(
    studio: StudioProcess,
    path: str,
    body: object,
    *,
    origin: str | None = "own",
    token: str | None = None,
    content_type: str = "application/json",
    method: str = "POST",
) -> tuple[int, dict[str, Any]]:
    """``method path`` to the studio with ``body``; ``origin`` ``"own"`` is the studio's."""
    url = studio.url.rstrip("/")
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method=method, headers={}
    )
    request.add_header("Content-Type", content_type)
    if origin is not None:
        request.add_header("Origin", url if origin == "own" else origin)
    if token is not None:
        request.add_header("X-Goondan-Csrf", token)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as refused:
        raw = refused.read()
        return refused.code, json.loads(raw) if raw.startswith(b"{") else {}


def session(studio: StudioProcess) -> dict[str, Any]:
    with urllib.request.urlopen(studio.url + "api/session", timeout=10) as answer:
        body: dict[str, Any] = json.loads(answer.read())
    return body


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"the page raised: {errors}"


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


def test_a_decision_from_anywhere_but_the_studios_page_is_refused(
    swarm: tuple[Path, Daemon, StudioProcess],
) -> None:
    directory, _, studio = swarm
    approval_id = park(directory, "ls")
    token = str(session(studio)["csrfToken"])
    reject = f"/api/approvals/{approval_id}/reject"
    approve = f"/api/approvals/{approval_id}/approve"
    reason = {"reason": "not from there"}

    status, body = post(studio, reject, reason, origin="http://attacker.example", token=token)
    assert (status, body["error"]["code"]) == (403, "ORIGIN_NOT_ALLOWED")
    status, body = post(studio, reject, reason, origin=None, token=token)
    assert (status, body["error"]["code"]) == (403, "ORIGIN_NOT_ALLOWED")
    status, body = post(studio, reject, reason)  # the page's token missing
    assert (status, body["error"]["code"]) == (403, "CSRF_TOKEN_INVALID")
    status, body = post(studio, reject, reason, token=token[:-1] + "x")
    assert (status, body["error"]["code"]) == (403, "CSRF_TOKEN_INVALID")
    status, _ = post(studio, reject, reason, token=token, content_type="text/plain")
    assert status == 415
    # A cross-origin page's preflight gets no CORS grant, so its browser sends nothing.
    status, _ = post(studio, reject, reason, origin="http://attacker.example", method="OPTIONS")
    assert status >= 400
    for arguments in ([], ["ls"], "ls", 7):
        status, body = post(studio, approve, {"arguments": arguments}, token=token)
        assert status == 400, arguments
        assert body["error"]["field"] == "arguments"
        assert "arguments must be a JSON object" in body["error"]["message"]
    status, body = post(studio, reject, {"reason": "  "}, token=token)
    assert (status, body["error"]["field"]) == (400, "reason")
    status, body = post(studio, approve, {"argumnets": {}}, token=token)
    assert status == 400
    assert "argumnets" in body["error"]["message"]
    status, body = post(studio, "/api/approvals/apr_0123456789abcdef/approve", {}, token=token)
    assert (status, body["error"]["code"]) == (404, "APPROVAL_NOT_FOUND")
    status, _ = post(studio, "/api/approvals/..%2f..%2fx/approve", {}, token=token)
    assert status == 404
    assert approval(directory, approval_id)["status"] == "pending"  # none of it acted

    status, body = post(studio, reject, reason, token=token)
    assert status == 200, body
    decided = body["approval"]
    assert (decided["status"], decided["reason"]) == ("rejected", "not from there")
    # Decided by the daemon's route, which recorded the studio's own process.
    who = decided["decidedBy"]
    assert (who["via"], who["uid"], who["pid"]) == ("unix", os.getuid(), studio.process.pid)
    assert body["turn"]["status"] == "ok"  # the model was told, and answered
    assert approval(directory, approval_id)["decidedBy"] == who
    status, body = post(studio, reject, reason, token=token)
    assert (status, body["error"]["code"]) == (409, "APPROVAL_ALREADY_DECIDED")


def test_a_studio_beyond_loopback_takes_no_decision(tmp_path: Path) -> None:
    directory = tmp_path / "swarm"
    daemon = example_daemon(directory)
    studio = StudioProcess("--host", "0.0.0.0", cwd=directory)
    try:
        approval_id = park(directory, "ls")
        facts = session(studio)
        assert facts["canDecide"] is False
        assert "loopback" in facts["why"]
        status, body = post(
            studio,
            f"/api/approvals/{approval_id}/approve",
            {},
            token=str(facts["csrfToken"]),
        )
        assert (status, body["error"]["code"]) == (403, "STUDIO_NOT_ON_LOOPBACK")
        assert approval(directory, approval_id)["status"] == "pending"
    finally:
        assert studio.stop() == 0
        daemon.stop()


def test_an_operator_edits_the_arguments_approves_and_reads_the_answer(
    page: Page, swarm: tuple[Path, Daemon, StudioProcess]
) -> None:
    from playwright.sync_api import expect

    directory, _, studio = swarm
    # The worker runs only when first asked: not started, and not "terminated".
    assert agent_rows(directory)["worker"]["status"] == "notStarted"
    page.goto(studio.url + "#/swarm")
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
    page.goto(studio.url + f"#/approvals/{approval_id}")
    item = page.locator(f'li.approval[data-approval-id="{approval_id}"]')
    expect(item).to_have_attribute("data-status", "pending", timeout=WAIT_MS)
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
