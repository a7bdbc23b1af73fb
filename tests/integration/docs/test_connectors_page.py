"""docs/guides/connectors.md's signed requests, sent as written to the webhook, Slack, GitHub
and Discord connectors of the page's Connections, in the example swarm run by a real daemon.

Only what must change is changed: each connector's port is a free one (the page's 8787 to 8790
in the commands and the Slack Connection's config), the page's ``Agent/reviewer`` is the
example's worker (the example has no reviewer), and the secrets are the test's own.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.cluster import free_port
from tests.support.walkthrough import Shell

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
PAGE = "docs/guides/connectors.md"
THIS = "tests/integration/docs/test_connectors_page.py"
PORTS = {"slack": 8787, "webhook": 8788, "github": 8789, "discord": 8790}
"""Each HTTP connector's default port, as the page's commands use them."""
PORT_VARIABLES = {"webhook": "WEBHOOK_PORT", "github": "GITHUB_WEBHOOK_PORT"}
PORT_VARIABLES["discord"] = "DISCORD_WEBHOOK_PORT"
SECRETS = ("WEBHOOK_SECRET", "SLACK_SIGNING_SECRET", "GITHUB_WEBHOOK_SECRET")
STATUS = re.compile(r"HTTP/1\.1 (\d{3}) ")  # bodies end without a newline


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    terminal = Shell(tmp_path)
    try:
        yield terminal
    finally:
        terminal.close()


def test_signed_requests_reach_each_http_connector(shell: Shell) -> None:
    keys, requests = readme.blocks_for(THIS, "test_signed_requests_reach_each_http_connector")
    [connections] = [b for b in readme.page_blocks(PAGE) if "name: slack-in" in b.text]
    ports = {name: free_port() for name in PORTS}
    for name, written in PORTS.items():
        shell.substitutions.append((f"127.0.0.1:{written}", f"127.0.0.1:{ports[name]}"))
    for name, variable in PORT_VARIABLES.items():
        shell.env[variable] = str(ports[name])
    for variable in SECRETS:
        shell.env[variable] = f"{variable.lower()}-of-the-test"
    declared = connections.text.replace("Agent/reviewer", "Agent/worker")
    declared = declared.replace('{ value: "8787" }', f'{{ value: "{ports["slack"]}" }}')
    example = (ROOT / "goondan.yaml.example").read_text()
    (shell.directory / "goondan.yaml").write_text(f"{example}---\n{declared}")
    shutil.copy(ROOT / "goondan.yaml.example", shell.directory / "goondan.yaml.example")

    made = shell.run(f'{keys.text}printf "%s" "$DISCORD_PUBLIC_KEY"')  # what it exported
    assert made.returncode == 0, made.stderr
    assert re.fullmatch(r"[0-9a-f]{64}", made.stdout), made.stdout
    shell.env["DISCORD_PUBLIC_KEY"] = made.stdout

    daemon = shell.start("python -m orchestrator run goondan.yaml")
    daemon.json_event("agent ready", agent="coordinator")
    for port in ports.values():
        daemon.json_event("connector listening", port=port)
    sent = shell.run(requests.text)
    assert sent.returncode == 0, sent.stderr
    # webhook 202, slack 200, github 202, discord answers its PING with {"type": 1}
    assert [int(s) for s in STATUS.findall(sent.stdout)] == [202, 200, 202, 200], sent.stdout
    assert sent.stdout.rstrip().endswith('{"type":1}'), sent.stdout
    daemon.json_event("turn finished", agent="worker", status="ok")  # the pull request's Turn
    assert daemon.stop() == 0, daemon.text[-4000:]
