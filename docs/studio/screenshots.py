"""Screenshots of the studio for the README: ``python docs/studio/screenshots.py``.

Runs the offline example swarm as a daemon in a temporary directory (with token prices and a
rate-limit pool added to its Models, so tokens, cost and pools show), gives it some work (two
handoffs, a long request, a shell command an operator rejects, a worker killed and restarted),
serves the studio over it and saves each view at 1280×800 as ``docs/studio/<view>.png`` (and
the swarm view in a 400 px wide window as ``narrow.png``). Needs the dev extra (Playwright) and
the system's Chromium (``apt-get install chromium``); ``--chromium PATH`` names another.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
USAGE = (
    "  pricing: { inputPerMillionTokens: 2.5, outputPerMillionTokens: 10 }\n"
    "  limits: { maxConcurrent: 4 }\n"
)
"""Added to each of the example's Models."""
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def cli(directory: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def wait_for_daemon(directory: Path, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "status", "--json"],
            cwd=directory,
            capture_output=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0:
            return
    raise SystemExit("the daemon did not start")


def give_work(directory: Path) -> None:
    cli(directory, "send", "coordinator", "write notes.txt hello world")
    cli(directory, "send", "coordinator", "write todo.md buy milk, call Ana, ship the studio")
    cli(directory, "send", "coordinator", "write essay.txt " + "the quick brown fox " * 40)
    cli(directory, "send", "worker", "run ls", "--no-wait")
    end = time.monotonic() + 60
    while not (approvals := json.loads(cli(directory, "approvals", "--json"))):
        if time.monotonic() > end:
            raise SystemExit("no approval was requested")
    cli(directory, "reject", approvals[0]["approvalId"], "--reason", "not on this host", "--wait")
    rows = json.loads(cli(directory, "status", "--json"))["agents"]
    os.kill(next(r["pid"] for r in rows if r["agent"] == "worker"), signal.SIGKILL)
    cli(directory, "send", "coordinator", "write done.txt all good", "--instance", "ops")


def unfocus(page: Page) -> None:
    """No focus ring in the picture."""
    page.evaluate("document.activeElement && document.activeElement.blur()")


def shoot(page: Page, url: str) -> None:
    page.goto(url + "#/swarm")
    expect(page.locator('a.node[data-agent="worker"]')).to_have_attribute(
        "data-status", "idle", timeout=20_000
    )
    expect(page.locator("#mode")).to_contain_text("live", timeout=20_000)
    unfocus(page)
    page.screenshot(path=str(OUT / "swarm.png"))

    page.goto(url + "#/traces")
    expect(page.locator("table.traces tbody tr")).to_have_count(5, timeout=20_000)
    page.screenshot(path=str(OUT / "traces.png"))

    page.locator("table.traces tbody tr").nth(4).get_by_role("link").first.click()
    rows = page.locator("li.wf-row")
    expect(rows).to_have_count(8, timeout=20_000)
    rows.nth(5).locator("button.span-toggle").click()
    unfocus(page)
    page.screenshot(path=str(OUT / "trace.png"))

    page.goto(url + "#/conversations/coordinator/default")
    expect(page.locator("li.msg").first).to_be_visible(timeout=20_000)
    page.locator("li.msg-tool details.fold").first.locator("summary").click()
    page.screenshot(path=str(OUT / "conversation.png"))

    page.goto(url + "#/logs?agent=worker")
    expect(page.locator("table.logs tbody tr").first).to_be_visible(timeout=20_000)
    page.screenshot(path=str(OUT / "logs.png"))

    page.set_viewport_size({"width": 400, "height": 800})
    page.goto(url + "#/swarm")
    expect(page.locator('a.node[data-agent="worker"]')).to_be_visible(timeout=20_000)
    unfocus(page)
    page.screenshot(path=str(OUT / "narrow.png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser to drive")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        model = "  provider: scripted\n  model: rules\n"
        example = (ROOT / "goondan.yaml.example").read_text()
        (directory / "goondan.yaml").write_text(example.replace(model, model + USAGE))
        daemon = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", "goondan.yaml"],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        studio = None
        try:
            wait_for_daemon(directory)
            give_work(directory)
            studio = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "studio", "--port", "0", "--no-open"],
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert studio.stdout is not None
            link = studio.stdout.readline().strip().removeprefix("studio: ")
            url = link.partition("?")[0]  # the views shown take no decision: no key needed
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=args.chromium, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                shoot(page, url)
                browser.close()
        finally:
            if studio is not None:
                studio.send_signal(signal.SIGTERM)
                studio.wait(timeout=30)
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
    for name in ("swarm", "traces", "trace", "conversation", "logs", "narrow"):
        print(OUT / f"{name}.png")


if __name__ == "__main__":
    main()
