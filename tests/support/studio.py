"""The studio as a real subprocess, the offline example swarm as a real daemon, and a real
Chromium driven by Playwright.

The browser is the system's Chromium (``/usr/bin/chromium``, Debian's ``chromium`` package);
Playwright never downloads one. Without it the browser tests skip, loudly, unless
``GOONDAN_REQUIRE_BROWSER=1`` (``.ci/run`` sets it, and installs the browser): then they fail.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.daemon import Daemon, run_cli

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "goondan.yaml.example"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRE_BROWSER = "GOONDAN_REQUIRE_BROWSER"


def chromium_path() -> str:
    """The system's Chromium; skips (or fails, under ``GOONDAN_REQUIRE_BROWSER=1``) without."""
    found = next(
        (
            path
            for path in (
                "/usr/bin/chromium",
                shutil.which("chromium"),
                shutil.which("chromium-browser"),
            )
            if path and os.path.exists(path)
        ),
        None,
    )
    reason = None
    if found is None:
        reason = "no Chromium: apt-get install chromium (CI's .ci/run installs it)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed: pip install -e '.[dev]'"
    if reason is not None:
        if os.environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(reason)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    assert found is not None
    return found


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium for the duration of the ``with``."""
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=BROWSER_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def watched_page(browser: Browser, width: int = 1280, height: int = 800) -> Iterator[Page]:
    """A page in a context of its own; the test fails if the page's script raised meanwhile."""
    context = browser.new_context(viewport={"width": width, "height": height})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"the page raised: {errors}"


class StudioProcess:
    """``python -m orchestrator studio`` on a free port, once it listens: :attr:`link`, what
    it printed (with the key that lets a browser opening it decide, on loopback), and
    :attr:`url`, its address alone."""

    def __init__(self, *args: str, cwd: Path, deadline: float = 30) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "studio", "--port", "0", "--no-open", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.link = self._read_url(deadline)
        self.url = self.link.partition("?")[0]

    def _read_url(self, deadline: float) -> str:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        end = time.monotonic() + deadline
        seen = b""
        while b"\n" not in seen:
            ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                self.stop()
                raise AssertionError(f"the studio printed no URL: {seen!r} {self.stderr()}")
            seen += chunk
        line = seen.decode().splitlines()[0]
        assert line.startswith("studio: http://"), line
        return line.removeprefix("studio: ")

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, deadline: float = 15) -> int:
        """Signal it and return its exit code (killed if it outlives ``deadline``)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
                raise AssertionError(f"the studio outlived {sig!r} by {deadline} s") from None
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return int(self.process.returncode)


def example_daemon(directory: Path) -> Daemon:
    """The offline example swarm as a daemon in ``directory`` (state in ``.goondan/``), ready."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE, directory / "goondan.yaml")
    daemon = Daemon(directory, bundle="goondan.yaml")
    daemon.wait_for("orchestrator started")
    return daemon


PRICING = "pricing: { inputPerMillionTokens: 2.5, outputPerMillionTokens: 10 }"
LIMITS = "limits: { maxConcurrent: 2 }"


def priced_daemon(directory: Path, trace_budget: int) -> Daemon:
    """The offline example swarm with prices, ``maxTokens: 50`` and a rate-limit pool on each
    Model and a trace budget of ``trace_budget`` total tokens, as a daemon in ``directory``,
    ready."""
    directory.mkdir(parents=True, exist_ok=True)
    text = EXAMPLE.read_text()
    model = "  provider: scripted\n  model: rules\n"
    assert text.count(model) == 2, "the example's Models changed"
    text = text.replace(model, f"{model}  maxTokens: 50\n  {PRICING}\n  {LIMITS}\n")
    policy = "  policy:\n    maxStepsPerTurn: 8\n"
    assert text.count(policy) == 1, "the example's Swarm changed"
    budget = f"  budgets:\n    trace: {{ totalTokens: {trace_budget} }}\n"
    (directory / "goondan.yaml").write_text(text.replace(policy, policy + budget))
    daemon = Daemon(directory, bundle="goondan.yaml")
    daemon.wait_for("orchestrator started")
    return daemon


def read_event_log(directory: Path) -> list[dict[str, Any]]:
    """Every runtime event ``directory``'s swarm has logged so far."""
    lines = (directory / ".goondan" / "runtime-events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def send(directory: Path, agent: str, text: str) -> dict[str, Any]:
    """Ask the daemon of ``directory`` and return its answer (``turn.traceId`` names the trace)."""
    done = run_cli("send", agent, text, "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def agent_rows(directory: Path) -> dict[str, dict[str, Any]]:
    """The daemon's status rows by agent."""
    done = run_cli("status", "--json", cwd=directory)
    assert done.returncode == 0, done.stderr
    return {row["agent"]: row for row in json.loads(done.stdout)["agents"]}


def wait_for_approval(directory: Path, deadline: float = 30) -> str:
    """The id of the first tool call parked for approval in ``directory``'s state."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        listed = run_cli("approvals", "--json", cwd=directory)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        if rows:
            return str(rows[0]["approvalId"])
    raise AssertionError(f"no approval was requested within {deadline} s")


def reject_next_approval(directory: Path, reason: str) -> str:
    """Wait for a parked tool call in ``directory``'s daemon and reject it; its approval id."""
    approval_id = wait_for_approval(directory)
    done = run_cli("reject", approval_id, "--reason", reason, "--wait", cwd=directory)
    assert done.returncode == 0, done.stderr
    return approval_id
