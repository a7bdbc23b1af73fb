"""A long conversation opens at its end in a real browser: the latest message in view, a
"Jump to latest" button whenever it is not, and new messages followed while the reader is at
the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.studio import StudioProcess, example_daemon, send, watched_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
"""Longest any expectation waits for the page (the machine may be busy)."""
TURNS = 8
"""Requests the worker answers before the page opens: four messages each, pages of them."""


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser, height=600) as opened:
        yield opened


def test_a_long_conversation_opens_at_its_latest_message_and_jumps_back_to_it(
    page: Page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    daemon = example_daemon(tmp_path)
    studio = StudioProcess(cwd=tmp_path)
    try:
        for turn in range(TURNS):
            send(tmp_path, "worker", f"write f{turn}.txt turn {turn}")
        page.goto(studio.url + "#/conversations/worker/default")
        messages = page.locator("li.msg")
        expect(messages).to_have_count(1 + 4 * TURNS, timeout=WAIT_MS)
        latest, first = messages.last, messages.first
        jump = page.get_by_role("button", name="Jump to latest")
        expect(latest).to_contain_text(f"f{TURNS - 1}.txt")
        expect(latest).to_be_in_viewport()
        expect(first).not_to_be_in_viewport()  # it is long: the end is what opened
        expect(jump).to_be_hidden()

        page.evaluate("window.scrollTo(0, 0)")  # a reader goes back to the start
        expect(first).to_be_in_viewport()
        expect(jump).to_be_visible(timeout=WAIT_MS)
        expect(jump).to_be_in_viewport()  # it stays on screen while the end is not
        jump.click()
        expect(latest).to_be_in_viewport(timeout=WAIT_MS)
        expect(latest).to_be_focused()
        expect(jump).to_be_hidden(timeout=WAIT_MS)

        # At the end, a new Turn's messages are followed as they come.
        send(tmp_path, "worker", "write late.txt after the page opened")
        expect(messages).to_have_count(1 + 4 * (TURNS + 1), timeout=WAIT_MS)
        expect(messages.last).to_contain_text("late.txt")
        expect(messages.last).to_be_in_viewport(timeout=WAIT_MS)
    finally:
        assert studio.stop() == 0
        daemon.stop()
