"""The studio in a real browser: a real daemon of the offline example, the studio as a real
process, the system's Chromium driven by Playwright.

One browser serves the module; the live swarm most tests read is shared too (a request, a
long request, a rejected shell command), and the tests that change a swarm (a crash, a stop,
prices, rate limits and budgets) run their own. Screenshots of each view land in the test's
temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.daemon import Daemon, run_cli, wait_gone
from tests.support.studio import (
    StudioProcess,
    agent_rows,
    example_daemon,
    priced_daemon,
    read_event_log,
    reject_next_approval,
    send,
    watched_page,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.timeout(240)

WAIT_MS = 20_000
"""Longest any expectation waits for the page (the machine may be busy)."""
LONG_TEXT = "lorem ipsum dolor sit amet " * 30
MARKUP = '<img src=x onerror="document.body.dataset.injected=1"><b>bold</b>'
"""Text that would run as script, were it ever put in the page as markup."""


@dataclass
class LiveSwarm:
    directory: Path
    daemon: Daemon
    studio: StudioProcess
    first_trace: str
    long_trace: str
    rejected_trace: str


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with watched_page(browser) as opened:
        yield opened


@pytest.fixture(scope="module")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSwarm]:
    directory = tmp_path_factory.mktemp("studio-live")
    daemon = example_daemon(directory)
    studio: StudioProcess | None = None
    try:
        first = send(directory, "coordinator", "write notes.txt hello")
        long = send(directory, "coordinator", f"write long.txt {LONG_TEXT}")
        send(directory, "coordinator", f"write markup.txt {MARKUP}")
        # A shell command parks for approval; rejecting it fails that tool call.
        parked = run_cli("send", "worker", "run ls", "--no-wait", cwd=directory)
        assert parked.returncode == 0, parked.stderr
        reject_next_approval(directory, "not in tests")
        rejected = json.loads(
            run_cli("logs", "--agent", "worker", "--json", cwd=directory).stdout.splitlines()[-1]
        )
        studio = StudioProcess("-c", "goondan.yaml", cwd=directory)
        yield LiveSwarm(
            directory,
            daemon,
            studio,
            first["turn"]["traceId"],
            long["turn"]["traceId"],
            rejected["traceId"],
        )
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()


def shot(page: Page, directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(directory / f"{name}.png"), full_page=True)


def test_the_swarm_view_shows_each_agent_its_status_and_the_handoff(
    page: Page, swarm: LiveSwarm, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    rows = agent_rows(swarm.directory)
    page.goto(swarm.studio.url + "#/swarm")
    expect(page.locator("#mode")).to_contain_text("live", timeout=WAIT_MS)
    for agent in ("coordinator", "worker"):
        node = page.locator(f'a.node[data-agent="{agent}"]')
        expect(node).to_have_attribute("data-status", "idle", timeout=WAIT_MS)
        expect(node).to_contain_text("idle")  # a label, not colour alone
        expect(node).to_contain_text(f"pid {rows[agent]['pid']}")
        expect(node).to_have_attribute("aria-label", re.compile(rf"^{agent}: idle, pid \d+"))
    expect(page.locator("svg.edges .edge-label")).to_have_text(re.compile(r"request ×\d+"))
    expect(page.locator(".edges-list li")).to_have_text(re.compile(r"coordinator → worker"))
    table = page.locator("table.agents tbody tr")
    expect(table).to_have_count(2)
    expect(table.filter(has_text="worker")).to_contain_text(str(rows["worker"]["pid"]))
    shot(page, tmp_path, "swarm")

    # Keyboard: the nodes are in the tab order; Enter opens the agent's traces.
    page.locator("nav.tabs a").last.focus()
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.dataset.agent")
    assert focused == "coordinator"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.agent") == "worker"
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#/traces\?agent=worker$"))
    expect(page.locator("h1")).to_have_text("Traces of worker")
    expect(page.locator("table.traces tbody tr").first).to_contain_text("worker")


def test_a_new_request_appears_live_and_its_waterfall_spans_two_agents(
    page: Page, swarm: LiveSwarm, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(swarm.studio.url + "#/traces")
    expect(page.locator(f'tr[data-trace="{swarm.first_trace}"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#mode")).to_contain_text("live", timeout=WAIT_MS)

    answer = send(swarm.directory, "coordinator", "write fresh.txt seen live")
    trace = answer["turn"]["traceId"]
    row = page.locator(f'tr[data-trace="{trace}"]')
    expect(row).to_be_visible(timeout=WAIT_MS)  # pushed, no reload
    expect(row).to_contain_text("coordinator")
    expect(row).to_contain_text("ok")
    expect(page.locator("table.traces tbody tr").first).to_have_attribute("data-trace", trace)
    shot(page, tmp_path, "traces")

    row.get_by_role("link", name="coordinator").click()
    spans = page.locator("li.wf-row")
    expect(spans).to_have_count(8, timeout=WAIT_MS)
    expected = [
        ("coordinator", "turn", "coordinator turn", "0"),
        ("coordinator", "step", "step 0", "1"),
        ("coordinator", "tool", "agents__request", "2"),
        ("worker", "turn", "worker turn", "3"),
        ("worker", "step", "step 0", "4"),
        ("worker", "tool", "file-system__write", "5"),
    ]
    seen = spans.evaluate_all(
        "rows => rows.map(r => [r.dataset.agent, r.dataset.kind, r.dataset.name, r.dataset.depth])"
    )
    assert [tuple(row) for row in seen[:6]] == expected
    # Bars by time: the worker's Turn starts after the coordinator's call began, within it.
    boxes = [spans.nth(i).locator(".wf-bar").bounding_box() for i in (2, 3)]
    assert boxes[0] is not None
    assert boxes[1] is not None
    assert boxes[1]["x"] >= boxes[0]["x"] - 1
    assert boxes[1]["x"] + boxes[1]["width"] <= boxes[0]["x"] + boxes[0]["width"] + 1
    expect(spans.nth(0).locator(".wf-dur-col")).to_contain_text("ms")
    shot(page, tmp_path, "trace")

    # Keyboard: open the write's details, then follow it to the conversation.
    toggle = spans.nth(5).locator("button.span-toggle")
    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    details = spans.nth(5).locator(".span-details")
    expect(details).to_contain_text('"path":"fresh.txt"')
    expect(details).to_contain_text('"written":true')
    details.get_by_role("link", name="Open in the conversation").click()
    expect(page).to_have_url(re.compile(r"#/conversations/worker/default\?call="))
    marked = page.locator("li.msg.highlight")
    expect(marked).to_have_count(2, timeout=WAIT_MS)  # the call and its result
    expect(marked.first.locator(".tool-call.highlight")).to_contain_text("fresh.txt")
    expect(marked.nth(1)).to_have_attribute("data-role", "tool")
    expect(marked.first).to_be_focused()

    # From the trace to its logs.
    page.go_back()
    page.get_by_role("link", name="Logs of this trace").click()
    expect(page).to_have_url(re.compile(rf"#/logs\?trace={trace}$"))
    logs = page.locator("table.logs tbody tr")
    expect(logs).to_have_count(16, timeout=WAIT_MS)
    traces = logs.evaluate_all(
        "rows => rows.map(r => r.querySelector('td:nth-child(5) a')?.getAttribute('aria-label'))"
    )
    assert set(traces) == {f"trace {trace}"}


def test_a_failed_tool_call_shows_its_error_in_the_waterfall(
    page: Page, swarm: LiveSwarm, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(swarm.studio.url + f"#/traces/{swarm.rejected_trace}")
    failed = page.locator('li.wf-row[data-name="bash__exec"]')
    expect(failed).to_have_class(re.compile("outcome-error"), timeout=WAIT_MS)
    expect(failed.locator(".span-error")).to_contain_text("not in tests")
    expect(failed.locator(".span-error")).to_contain_text("E_TOOL_REJECTED")
    expect(failed).to_have_attribute("data-kind", "approval")
    # Who rejected it: the CLI's process on api.sock, as the daemon recorded it.
    failed.locator("button.span-toggle").click()
    decided_by = failed.locator(".span-details dd", has_text="on api.sock")
    expect(decided_by).to_have_text(
        re.compile(rf"^uid {os.getuid()} (\(\S+\) )?pid \d+ on api\.sock$")
    )
    expect(page.locator(".trace-summary")).to_contain_text("error")
    page.goto(swarm.studio.url + "#/traces")
    expect(page.locator(f'tr[data-trace="{swarm.rejected_trace}"]')).to_contain_text("error")
    shot(page, tmp_path, "trace-error")


def test_a_conversation_shows_messages_tool_calls_and_folds_long_values(
    page: Page, swarm: LiveSwarm, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(swarm.studio.url + "#/conversations")
    links = page.locator("nav.instances a")
    expect(links).to_have_count(2, timeout=WAIT_MS)
    page.locator('nav.instances a[data-agent="coordinator"]').click()
    expect(page).to_have_url(re.compile(r"#/conversations/coordinator/default$"))
    messages = page.locator("li.msg")
    expect(messages.first).to_have_attribute("data-role", "system", timeout=WAIT_MS)
    roles = messages.evaluate_all("items => items.map(i => i.dataset.role)")
    assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"]
    first_call = messages.nth(2).locator(".tool-call")
    expect(first_call).to_contain_text("agents__request")
    expect(first_call).to_contain_text('"target":"worker"')
    expect(messages.nth(4)).to_contain_text("Done. The worker reports: wrote 5 bytes to notes.txt")
    expect(messages.nth(1).get_by_role("link", name=re.compile("trace"))).to_have_attribute(
        "href", f"#/traces/{swarm.first_trace}"
    )

    # The tool result of agents__request is long: folded to a preview until asked.
    result = messages.nth(3).locator("details.fold")
    expect(result).not_to_have_attribute("open", "")
    expect(result.locator("pre.full")).to_be_hidden()
    result.locator("summary").focus()
    page.keyboard.press("Enter")
    expect(result.locator("pre.full")).to_be_visible()
    expect(result.locator("pre.full")).to_contain_text('"correlationId"')

    # The long request: its text folded, the whole of it one Space away.
    long_user = messages.filter(has_text="write long.txt").first
    text = long_user.locator("details.fold")
    expect(text.locator(".more")).to_contain_text("Show all")
    expect(text.locator(".full")).to_be_hidden()
    text.locator("summary").focus()
    page.keyboard.press("Space")
    expect(text.locator(".full")).to_have_text(f"write long.txt {LONG_TEXT}".strip())
    shot(page, tmp_path, "conversation")

    # Text from the swarm is shown as text, never as markup: in messages, and in the logs.
    shown = messages.filter(has_text="write markup.txt").first
    expect(shown.locator(".msg-text")).to_have_text(f"write markup.txt {MARKUP}")
    page.goto(swarm.studio.url + "#/logs?agent=worker&type=tool.")
    expect(page.locator("table.logs")).to_contain_text("<b>bold</b>", timeout=WAIT_MS)
    assert page.locator("#view img, #view b").count() == 0
    assert page.evaluate("document.body.dataset.injected") is None


def test_logs_filter_by_agent_type_and_level_and_link_to_traces(
    page: Page, swarm: LiveSwarm, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(swarm.studio.url + "#/logs")
    rows = page.locator("table.logs tbody tr")
    expect(rows.first).to_be_visible(timeout=WAIT_MS)
    page.select_option("#log-agent", "worker")
    expect(page).to_have_url(re.compile(r"#/logs\?agent=worker$"))
    expect(rows.first).to_have_attribute("data-agent", "worker", timeout=WAIT_MS)
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.agent)")) == {"worker"}

    page.select_option("#log-type", "tool.")
    expect(page).to_have_url(re.compile(r"agent=worker&type=tool\.$"))
    expect(rows.first).to_have_attribute("data-type", re.compile(r"^tool\."), timeout=WAIT_MS)
    types = set(rows.evaluate_all("rs => rs.map(r => r.dataset.type)"))
    assert types == {"tool.called", "tool.completed"}

    # The shell command that waited for an operator, who rejected it.
    page.select_option("#log-type", "approval.")
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.type)") == [
        "approval.decided",  # newest first
        "approval.requested",
    ]
    expect(rows.first).to_contain_text("not in tests")
    page.select_option("#log-level", "warning")  # the level asked and those above it
    expect(page).to_have_url(re.compile(r"level=warning$"))
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.level)")) == {"warning"}
    shot(page, tmp_path, "logs")
    page.select_option("#log-level", "error")
    expect(page.locator("#view [role=status]")).to_have_text("0 events", timeout=WAIT_MS)
    expect(rows).to_have_count(0)

    page.goto(swarm.studio.url + "#/logs?agent=worker&type=approval.")
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    rows.first.locator("td:nth-child(5) a").click()
    expect(page).to_have_url(re.compile(rf"#/traces/{swarm.rejected_trace}$"))


def test_a_killed_agent_turns_crashed_then_idle_without_a_reload(
    browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    daemon = example_daemon(tmp_path / "swarm")
    studio = StudioProcess(cwd=tmp_path / "swarm")
    try:
        send(tmp_path / "swarm", "coordinator", "write a.txt hi")
        worker_pid = agent_rows(tmp_path / "swarm")["worker"]["pid"]
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(studio.url + "#/swarm")
        node = page.locator('a.node[data-agent="worker"]')
        expect(node).to_have_attribute("data-pid", str(worker_pid), timeout=WAIT_MS)
        expect(node).to_have_attribute("data-status", "idle")
        expect(page.locator("#mode")).to_contain_text("live", timeout=WAIT_MS)
        # Every status the worker's node takes from here on, as the page shows it.
        page.evaluate(
            """() => {
              window.statuses = [];
              const graph = document.querySelector('.graph');
              const note = (el) => {
                if (el.matches && el.matches('a.node[data-agent="worker"]')) {
                  window.statuses.push(el.dataset.status);
                }
              };
              new MutationObserver((records) => {
                for (const r of records) {
                  if (r.type === 'attributes') note(r.target);
                  for (const added of r.addedNodes || []) note(added);
                }
              }).observe(graph, {subtree: true, childList: true, attributes: true,
                                 attributeFilter: ['data-status']});
            }"""
        )
        os.kill(worker_pid, signal.SIGKILL)
        assert wait_gone(worker_pid)
        expect(node).to_contain_text("crashed", timeout=WAIT_MS)  # "crashed N s ago: ..."
        expect(node).to_contain_text("signal SIGKILL")
        expect(node).to_have_attribute("data-status", "idle", timeout=WAIT_MS)
        expect(node).not_to_have_attribute("data-pid", str(worker_pid))
        expect(node).to_contain_text("crashes 1")
        statuses = page.evaluate("window.statuses")
        assert "crashed" in statuses, statuses
        assert statuses[-1] == "idle"
        assert statuses.index("crashed") < len(statuses) - 1
        new_pid = agent_rows(tmp_path / "swarm")["worker"]["pid"]
        expect(node).to_have_attribute("data-pid", str(new_pid))
        expect(page.locator('table.agents tr[data-agent="worker"] td').nth(3)).to_have_text("1")
        shot(page, tmp_path / "screens", "swarm-after-crash")
        page.goto(studio.url + "#/logs?level=error")
        errors = page.locator("table.logs tbody tr")
        expect(errors).to_have_count(1, timeout=WAIT_MS)
        expect(errors.first).to_have_attribute("data-type", "process.exited")
        expect(errors.first).to_contain_text("SIGKILL")
        context.close()
    finally:
        assert studio.stop() == 0
        daemon.stop()


def test_after_the_fact_the_studio_reads_the_state_directory(
    browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    directory = tmp_path / "swarm"
    daemon = example_daemon(directory)
    trace = send(directory, "coordinator", "write later.txt read afterwards")["turn"]["traceId"]
    os.kill(daemon.process.pid, signal.SIGTERM)
    assert daemon.process.wait(timeout=30) == 0
    daemon.stop()
    studio = StudioProcess("--state-dir", str(directory / ".goondan"), cwd=tmp_path)
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(studio.url + "#/swarm")
        expect(page.locator("#mode")).to_contain_text("after the fact", timeout=WAIT_MS)
        for agent in ("coordinator", "worker"):
            node = page.locator(f'a.node[data-agent="{agent}"]')
            expect(node).to_have_attribute("data-status", "terminated", timeout=WAIT_MS)
            expect(node).to_contain_text("terminated")
        expect(page.locator(".edges-list li")).to_have_text(re.compile("coordinator → worker"))
        shot(page, tmp_path / "screens", "swarm")

        page.click("nav.tabs >> text=Traces")
        row = page.locator(f'tr[data-trace="{trace}"]')
        expect(row).to_contain_text("coordinator", timeout=WAIT_MS)
        row.get_by_role("link", name="coordinator").click()
        expect(page.locator("li.wf-row")).to_have_count(8, timeout=WAIT_MS)
        names = page.locator("li.wf-row").evaluate_all("rs => rs.map(r => r.dataset.name)")
        assert names[:6] == [
            "coordinator turn",
            "step 0",
            "agents__request",
            "worker turn",
            "step 0",
            "file-system__write",
        ]
        shot(page, tmp_path / "screens", "trace")

        page.goto(studio.url + "#/conversations/worker/default")
        expect(page.locator("li.msg")).to_have_count(5, timeout=WAIT_MS)
        expect(page.locator("li.msg-tool")).to_contain_text('"path":"later.txt"')
        shot(page, tmp_path / "screens", "conversation")

        page.goto(studio.url + f"#/logs?trace={trace}")
        expect(page.locator("table.logs tbody tr")).to_have_count(16, timeout=WAIT_MS)
        expect(page.locator("#log-follow")).to_be_disabled()
        shot(page, tmp_path / "screens", "logs")

        # A daemon that starts again is noticed: the page turns live without a reload.
        page.goto(studio.url + "#/swarm")
        again = example_daemon(directory)
        try:
            expect(page.locator("#mode")).to_contain_text("live", timeout=WAIT_MS)
            expect(page.locator('a.node[data-agent="coordinator"]')).to_have_attribute(
                "data-status", "idle", timeout=WAIT_MS
            )
        finally:
            again.stop()
        context.close()
    finally:
        assert studio.stop(signal.SIGINT) == 0


def tokens_text(count: int) -> str:
    """A token count as the page shows it."""
    return f"{count:,}"


def cost_text(cost: float) -> str:
    """A cost as the page shows it: two to six decimals."""
    whole, _, decimals = f"{cost:.6f}".partition(".")
    return f"{whole}.{decimals.rstrip('0').ljust(2, '0')}"


def step_usage(log: list[dict[str, Any]], trace: str) -> dict[str, dict[str, Any]]:
    """The ``tokenUsage`` of each Step of ``trace`` that called the model, by span id."""
    return {
        e["spanId"]: e["tokenUsage"]
        for e in log
        if e["type"] == "step.completed" and e.get("traceId") == trace and e.get("tokenUsage")
    }


def test_tokens_cost_pools_and_budgets_show_live_and_after_the_fact(
    browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    directory = tmp_path / "swarm"
    daemon = priced_daemon(directory, trace_budget=3000)
    studio: StudioProcess | None = None
    try:
        first = send(directory, "coordinator", "write notes.txt hello")["turn"]["traceId"]
        # Each call reserves its prompt's estimate (the tool definitions come to some 800 tokens
        # for the coordinator, 1300 for the worker) and maxTokens 50. The coordinator's call
        # with this long text fits under 3000 tokens; the worker's, with the text again beside
        # what the coordinator used, does not, and is refused.
        over = run_cli("send", "coordinator", "write long.txt " + "lorem ipsum dolor " * 300,
                       "--json", cwd=directory)  # fmt: skip
        refused = json.loads(over.stdout)["turn"]
        assert refused["error"]["code"] == "E_BUDGET_EXCEEDED", over.stdout
        over_trace = refused["traceId"]
        status = json.loads(run_cli("status", "--json", cwd=directory).stdout)
        used = {row["agent"]: row["usage"] for row in status["agents"]}
        assert {pool["pool"] for pool in status["pools"]} == {"coordinator-brain", "worker-brain"}
        book = run_cli("usage", "--trace", first, "--json", cwd=directory)
        assert book.returncode == 0, book.stderr
        left = json.loads(book.stdout)["remaining"]["totalTokens"]
        log = read_event_log(directory)
        steps = step_usage(log, first)
        total = sum(u["totalTokens"] for u in steps.values())
        assert left == 3000 - total  # the daemon's book and the log agree
        exceeded = next(e for e in log if e["type"] == "budget.exceeded")

        studio = StudioProcess(cwd=directory)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))

        # Swarm: each agent's tokens and cost since the daemon started, and the pools.
        page.goto(studio.url + "#/swarm")
        expect(page.locator("#mode")).to_contain_text("live", timeout=WAIT_MS)
        for agent in ("coordinator", "worker"):
            row = page.locator(f'table.agents tr[data-agent="{agent}"]')
            expect(row.locator("td.tokens")).to_have_text(
                tokens_text(used[agent]["totalTokens"]), timeout=WAIT_MS
            )
            assert used[agent]["cost"] > 0
            expect(row.locator("td.cost")).to_have_text(cost_text(used[agent]["cost"]))
            expect(row.locator("td.permits")).to_have_text("0")
            expect(page.locator(f'a.node[data-agent="{agent}"]')).to_contain_text(
                f"{tokens_text(used[agent]['totalTokens'])} tokens"
            )
        pools = page.locator("table.pools tbody tr")
        expect(pools).to_have_count(2)
        for pool in status["pools"]:
            cells = page.locator(f'table.pools tr[data-pool="{pool["pool"]}"] td')
            expect(cells.nth(0)).to_have_text("0 / 2")  # in use / max
            expect(cells.nth(1)).to_have_text("0")  # waiting
            expect(cells.nth(3)).to_have_text(str(pool["granted"]))
        shot(page, tmp_path / "screens", "swarm-usage")

        # The trace within its budget: its tokens, each Step's, and what is left.
        page.goto(studio.url + f"#/traces/{first}")
        facts = page.locator(".trace-summary")
        expect(facts.locator('[data-fact="tokens"] dd')).to_have_text(
            tokens_text(total), timeout=WAIT_MS
        )
        cost = round(sum(u["cost"] for u in steps.values()), 6)
        expect(facts.locator('[data-fact="cost"] dd')).to_have_text(cost_text(cost))
        expect(facts.locator('[data-fact="budget"] dd')).to_have_text(
            f"totalTokens {tokens_text(left)} of 3,000 left"
        )
        assert len(steps) == 4  # two Steps of each agent called the model
        for span_id, usage in steps.items():
            cell = page.locator(f'li.wf-row[data-span-id="{span_id}"] > .wf-line .wf-tokens-col')
            expect(cell).to_have_text(f"{tokens_text(usage['totalTokens'])} tok")
        expect(page.locator("li.wf-mark")).to_have_count(0)
        shot(page, tmp_path / "screens", "trace-usage")

        # The trace past its budget: the worker was refused its next call, then the
        # coordinator (whose request to the worker had failed) was refused its own.
        refusals = [
            e for e in log if e["type"] == "budget.exceeded" and e.get("traceId") == over_trace
        ]
        assert [e["agentName"] for e in refusals] == ["worker", "coordinator"]
        page.goto(studio.url + f"#/traces/{over_trace}")
        marks = page.locator('li.wf-mark[data-type="budget.exceeded"]')
        expect(marks).to_have_count(2, timeout=WAIT_MS)
        expect(marks.first).to_contain_text(
            f"trace budget exceeded: totalTokens {tokens_text(exceeded['used'])} of 3,000"
        )
        budget_mark = page.locator('li.wf-mark[data-type="budget.exceeded"]')
        for agent in ("worker", "coordinator"):
            refused_step = page.locator(
                f'li.wf-row[data-kind="step"][data-agent="{agent}"]', has=budget_mark
            )
            expect(refused_step).to_have_count(1)
        expect(page.locator('[data-fact="budget"] dd')).to_contain_text("exceeded")
        shot(page, tmp_path / "screens", "trace-exceeded")

        page.goto(studio.url + "#/traces")
        expect(page.locator(f'tr[data-trace="{first}"] td.tokens')).to_have_text(
            tokens_text(total), timeout=WAIT_MS
        )
        expect(page.locator(f'tr[data-trace="{first}"] td.budget')).to_contain_text("left")
        expect(page.locator(f'tr[data-trace="{over_trace}"] td.budget')).to_contain_text("exceeded")

        page.goto(studio.url + "#/logs?type=budget.")
        logged = page.locator("table.logs tbody tr")
        expect(logged).to_have_count(len(refusals), timeout=WAIT_MS)
        expect(logged.first.locator(".log-sentence")).to_have_text(
            f"trace budget exceeded: totalTokens {tokens_text(exceeded['used'])} of 3,000 "
            "(requests entering at coordinator)"
        )

        # After the fact: the tokens summed from the log are the daemon's; no pools.
        page.goto(studio.url + "#/swarm")
        os.kill(daemon.process.pid, signal.SIGTERM)
        assert daemon.process.wait(timeout=30) == 0
        expect(page.locator("#mode")).to_contain_text("after the fact", timeout=WAIT_MS)
        for agent in ("coordinator", "worker"):
            row = page.locator(f'table.agents tr[data-agent="{agent}"]')
            expect(row.locator("td.tokens")).to_have_text(
                tokens_text(used[agent]["totalTokens"]), timeout=WAIT_MS
            )
            expect(row.locator("td.permits")).to_have_text("–")
        expect(page.locator("table.pools")).to_have_count(0)
        assert "null" not in page.locator("#view").inner_text()  # nothing missing said as such

        # A conversation's lasting usage, as its agent keeps it (flushed when it stopped).
        [metadata] = (directory / ".goondan" / "agents" / "worker").glob(
            "instances/*/metadata.json"
        )
        kept = json.loads(metadata.read_text())["usage"]
        assert kept["totalTokens"] == used["worker"]["totalTokens"]
        page.goto(studio.url + "#/conversations/worker/default")
        header = page.locator(".conversation-usage")
        expect(header.locator('[data-fact="tokens"] dd')).to_have_text(
            tokens_text(kept["totalTokens"]), timeout=WAIT_MS
        )
        expect(header.locator('[data-fact="input"] dd')).to_have_text(
            tokens_text(kept["inputTokens"])
        )
        expect(header.locator('[data-fact="cost"] dd')).to_have_text(cost_text(kept["cost"]))
        expect(header.locator('[data-fact="model-calls"] dd')).to_have_text(str(kept["calls"]))
        shot(page, tmp_path / "screens", "conversation-usage")
        context.close()
        assert not errors, f"the page raised: {errors}"
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()


def permit_events(trace: str) -> list[dict[str, Any]]:
    """A worker whose model calls waited for permits of a shared pool, as the daemon logs it."""

    def at(ms: int) -> str:
        return f"2026-11-23T18:00:0{ms // 1000}.{ms % 1000:03d}Z"

    def of(
        kind: str, ms: int, span: str | None = None, parent: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        event = {"type": kind, "timestamp": at(ms), "agentName": "worker", "traceId": trace}
        if span is not None:
            event.update(instanceKey="default", spanId=span)
        if parent is not None:
            event["parentSpanId"] = parent
        return {**event, **fields}

    usage = {"promptTokens": 1200, "completionTokens": 34, "totalTokens": 1234, "cost": 0.00334}
    return [
        of("turn.started", 0, "turn", turnId="t1"),
        of("step.started", 5, "s0", "turn", stepIndex=0),
        of("model.permit.waiting", 6, instanceKey="default", pool="shared",
           reason="maxConcurrent", position=1, inUse=2),
        of("model.permit.granted", 1256, instanceKey="default", pool="shared", waitedMs=1250,
           reason="maxConcurrent"),
        of("step.completed", 1300, "s0", "turn", stepIndex=0, duration=1295.0,
           tokenUsage=usage),
        of("step.started", 1301, "s1", "turn", stepIndex=1),
        of("model.rate_limited", 1400, instanceKey="default", pool="shared", retryAfterMs=2000),
        of("model.permit.timeout", 3400, instanceKey="default", pool="shared", reason="paused",
           waitedMs=2000),
        of("step.failed", 3401, "s1", "turn", stepIndex=1, duration=2100.0,
           errorCode="E_PERMIT_TIMEOUT", errorMessage="no permit for a model call"),
        of("turn.failed", 3402, "turn", turnId="t1", duration=3402.0,
           errorCode="E_PERMIT_TIMEOUT", errorMessage="no permit for a model call"),
    ]  # fmt: skip


def test_waits_for_model_permits_show_on_the_steps_they_delayed(page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    trace = "0af7651916cd43dd8448eb211c80319c"
    state = tmp_path / "state"
    state.mkdir()
    lines = [json.dumps(event) for event in permit_events(trace)]
    (state / "runtime-events.jsonl").write_text("\n".join(lines) + "\n")
    studio = StudioProcess("--state-dir", str(state), cwd=tmp_path)
    try:
        page.goto(studio.url + f"#/traces/{trace}")
        first = page.locator('li.wf-row[data-span-id="s0"]')
        expect(first.locator(".wf-tokens-col")).to_have_text("1,234 tok", timeout=WAIT_MS)
        waits = first.locator("li.wf-mark")
        expect(waits).to_have_count(1)  # the wait, said once it ended
        expect(waits).to_have_attribute("data-type", "model.permit.granted")
        expect(waits).to_contain_text(
            "model permit from pool shared after 1,250 ms (waited on maxConcurrent)"
        )
        expect(first.locator(".wf-marker")).to_have_count(1)
        second = page.locator('li.wf-row[data-span-id="s1"] li.wf-mark')
        assert second.evaluate_all("ms => ms.map(m => m.dataset.type)") == [
            "model.rate_limited",
            "model.permit.timeout",
        ]
        expect(second.first).to_contain_text(
            "pool shared paused by the provider's rate limit for 2,000 ms"
        )
        expect(second.nth(1)).to_contain_text(
            "no model permit from pool shared within 2,000 ms: waited on paused"
        )
        facts = page.locator(".trace-summary")
        expect(facts.locator('[data-fact="permit-waits"] dd')).to_have_text("3.25 s")
        expect(facts.locator('[data-fact="cost"] dd')).to_have_text("0.00334")
        shot(page, tmp_path, "trace-waits")

        page.goto(studio.url + "#/logs?type=model.")
        rows = page.locator("table.logs tbody tr")
        expect(rows).to_have_count(4, timeout=WAIT_MS)
        assert rows.evaluate_all("rs => rs.map(r => [r.dataset.type, r.dataset.level])") == [
            ["model.permit.timeout", "warning"],
            ["model.rate_limited", "warning"],
            ["model.permit.granted", "info"],
            ["model.permit.waiting", "info"],
        ]
        expect(rows.last.locator(".log-sentence")).to_have_text(
            "waiting for a model permit from pool shared: maxConcurrent, position 1, 2 in use"
        )
        expect(rows.last).to_contain_text('pool="shared"')
    finally:
        assert studio.stop() == 0


def test_a_narrow_window_stacks_the_views(page: Page, swarm: LiveSwarm, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 400, "height": 800})
    page.goto(swarm.studio.url + "#/swarm")
    expect(page.locator('a.node[data-agent="worker"]')).to_be_visible(timeout=WAIT_MS)
    # Both boxes read at once: a live refresh may redraw the graph between two reads.
    top, below = page.evaluate(
        """() => ['coordinator', 'worker'].map(name => {
          const r = document.querySelector(`a.node[data-agent="${name}"]`).getBoundingClientRect();
          return {x: r.x, y: r.y, width: r.width, height: r.height};
        })"""
    )
    assert below["y"] >= top["y"] + top["height"]  # one above the other
    assert below["x"] + below["width"] <= 400
    expect(page.locator("table.agents")).to_be_visible()
    assert "null" not in page.locator("#view").inner_text()
    shot(page, tmp_path, "swarm-narrow")
    page.goto(swarm.studio.url + "#/conversations/worker/default?call=x")
    instances = page.locator("nav.instances").bounding_box()
    pane = page.locator("section.messages-pane").bounding_box()
    assert instances is not None
    assert pane is not None
    assert pane["y"] >= instances["y"] + instances["height"]
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400, f"the page scrolls sideways: {width} px"


def test_the_studio_serves_only_its_own_files_to_loopback_names(swarm: LiveSwarm) -> None:
    def get(path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(swarm.studio.url.rstrip("/") + path)
        if host is not None:
            request.add_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as refused:
            return refused.code, dict(refused.headers), refused.read()

    status, headers, body = get("/")
    assert status == 200
    assert b"goondan studio" in body
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert get("/static/app.js")[0] == 200
    for escape in (
        "/static/../__init__.py",
        "/static/%2e%2e/__init__.py",
        "/static/..%2fserver.py",
    ):
        status, _, body = get(escape)
        assert status == 404, escape
        assert b"import" not in body
    assert get("/api/agents", host="attacker.example")[0] == 421
    assert get("/api/agents", host="localhost")[0] == 200
    assert get("/api/traces/unknown")[0] == 404
    assert get("/api/conversations/worker/nobody")[0] == 404
    assert get("/api/events?level=loud")[0] == 400
    assert get("/api/events?since=yesterday")[0] == 400
    assert get("/api/events?since=99999999999d")[0] == 400  # before the year 1
    assert get("/api/usage?trace=../v1/agents")[0] == 400
    assert get("/api/usage?trace=a%0d%0aHost:%20x")[0] == 400
    assert get("/api/usage?traces=many")[0] == 400
    assert get("/api/usage", host="attacker.example")[0] == 421
    status, _, body = get(f"/api/usage?trace={swarm.first_trace}")
    assert status == 200
    assert json.loads(body)["mode"] == "live"
    assert json.loads(body)["trace"]["traceId"] == swarm.first_trace
    assert json.loads(get("/api/usage?trace=0123abcd")[2]) == {"mode": "live", "trace": None}
    status, _, body = get(f"/api/traces/{swarm.first_trace}")
    assert status == 200
    assert [s["name"] for s in json.loads(body)["spans"]][:3] == [
        "coordinator turn",
        "step 0",
        "agents__request",
    ]
