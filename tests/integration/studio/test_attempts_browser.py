"""A Turn its agent died under, in the studio in a real browser: one Turn with its attempts, the
crash between them, and what became of the call the crash cut short.

A real daemon runs the ledger swarm (``tests/support/ledger.py``): ``append KEY`` calls a
non-idempotent tool that SIGKILLs its agent right after its effect (the next attempt answers it
``E_TOOL_INTERRUPTED``), ``note KEY`` an idempotent one that does the same (run again).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.daemon import Daemon, run_cli
from tests.support.ledger import effects, write_ledger_swarm
from tests.support.studio import StudioProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
"""Longest any expectation waits for the page (the machine may be busy)."""


def ask(directory: Path, text: str) -> dict[str, Any]:
    done = run_cli("send", "front", text, "--instance", "r1", "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def open_trace(page: Page, studio: StudioProcess, trace: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{studio.url}#/traces/{trace}")
    expect(page.locator("li.wf-row.wf-attempt[data-kind=turn]")).to_have_count(2, timeout=WAIT_MS)


def test_a_resumed_turn_shows_as_one_turn_with_its_attempts(
    browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    write_ledger_swarm(tmp_path, attempts=3)
    daemon = Daemon(tmp_path, bundle="goondan.yaml")
    studio: StudioProcess | None = None
    try:
        daemon.wait_for("orchestrator started")
        appended = ask(tmp_path, "append k1")
        noted = ask(tmp_path, "note k2")
        assert (appended["output"], noted["output"]) == ("unsure E_TOOL_INTERRUPTED", "done 2")
        assert effects(tmp_path) == ["append_die k1", "note_die k2", "note_die k2"]
        studio = StudioProcess("-c", "goondan.yaml", cwd=tmp_path)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))

        # The non-idempotent call: cut short, then answered E_TOOL_INTERRUPTED.
        open_trace(page, studio, appended["turn"]["traceId"])
        turns = page.locator("li.wf-row.wf-attempt[data-kind=turn]")
        expect(turns.nth(0)).to_contain_text("attempt 1 of 2")
        expect(turns.nth(0)).to_contain_text("interrupted")
        expect(turns.nth(0)).to_contain_text("front's process died under this attempt")
        expect(turns.nth(1)).to_contain_text("attempt 2 of 2")
        crash = page.locator("li.wf-crash")
        expect(crash).to_have_count(1)
        expect(crash).to_contain_text("front's process died under attempt 1")
        expect(crash).to_contain_text("answered E_TOOL_INTERRUPTED: ledger__append_die")
        # Attempt 1 with its Step and its call, the crash, then attempt 2 with its Step.
        order = page.locator("ol.waterfall > li").evaluate_all(
            "rows => rows.map(r => r.classList.contains('wf-crash') ? 'crash' : r.dataset.name)"
        )
        assert order == [
            "front turn",
            "step 0",
            "ledger__append_die",
            "crash",
            "front turn",
            "step 1",
        ]
        cut = page.locator('li.wf-row[data-name="ledger__append_die"]')
        expect(cut.locator(".span-resumed")).to_have_attribute(
            "data-resumed-as", "E_TOOL_INTERRUPTED"
        )
        expect(page.locator('[data-fact="status"]')).to_contain_text("ok")
        turns.nth(1).locator("button.span-toggle").click()
        expect(turns.nth(1).locator(".span-details")).to_contain_text("2 of 2")
        page.screenshot(path=str(tmp_path / "attempts.png"), full_page=True)

        # The idempotent call: cut short, then run again by the next attempt.
        open_trace(page, studio, noted["turn"]["traceId"])
        expect(page.locator("li.wf-crash")).to_contain_text("run again: ledger__note_die")
        runs = page.locator('li.wf-row[data-name="ledger__note_die"]')
        expect(runs).to_have_count(2)
        expect(runs.nth(0).locator(".span-resumed")).to_have_attribute("data-resumed-as", "rerun")
        expect(runs.nth(1)).not_to_contain_text("interrupted")

        # The conversation says on the Turn's message how many attempts it took.
        page.goto(f"{studio.url}#/conversations/front/r1")
        badges = page.locator("li.msg-user .attempt-badge")
        expect(badges).to_have_count(2, timeout=WAIT_MS)
        expect(badges.nth(0)).to_have_text("2 attempts")
        expect(page.locator("li.msg-tool").first).to_contain_text(re.compile("E_TOOL_INTERRUPTED"))
        context.close()
        assert not errors, f"the page raised: {errors}"
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()
