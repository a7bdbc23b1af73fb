"""docs/guides/connectors.md's signed requests, sent as written to the webhook, Slack, GitHub
and Discord connectors of the page's Connections, in the example swarm run by a real daemon.

Only what must change is changed: each connector's port is a free one (the page's 8787 to 8790
in the commands and the Slack Connection's config), the page's ``Agent/reviewer`` is the
example's worker (the example has no reviewer), and the secrets are the test's own.
"""

from __future__ import annotations

import json
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


FEED_CLIENT = """

# The reader's part, which the guide leaves to them: its feed's client, here two orders.
from types import SimpleNamespace


async def poll_orders(url, token):
    assert (url, token) == ("https://shop.example/feed", "shop-token-of-the-test")
    yield SimpleNamespace(id="17", summary="2 mugs", priority="low")
    yield SimpleNamespace(id="18", summary="a kettle, urgent", priority="high")
"""


def test_the_feed_connector_of_the_guide_routes_its_orders(shell: Shell) -> None:
    """The guide's ``feed`` Connector and ``shop`` Connection in the example swarm, its
    ``run`` as written with a feed client of the test's: each order is routed by the first
    rule it matches, and the swarm stops once the feed is exhausted and the orders answered."""
    [module] = readme.blocks_for(THIS, "test_the_feed_connector_of_the_guide_routes_its_orders")
    [declared] = [b for b in readme.page_blocks(PAGE) if "name: feed" in b.text]
    example = (ROOT / "goondan.yaml.example").read_text()
    resources = declared.text.replace("Agent/triage", "Agent/worker")  # the example's
    (shell.directory / "goondan.yaml").write_text(f"{example}---\n{resources}")
    (shell.directory / "feed.py").write_text(module.text + FEED_CLIENT)
    shell.env["SHOP_TOKEN"] = "shop-token-of-the-test"
    done = shell.run("python -m orchestrator run goondan.yaml")
    assert done.returncode == 0, done.stderr[-4000:]
    listed = shell.run("python -m orchestrator instances --json")
    assert listed.returncode == 0, listed.stderr
    instances = {(i["agentName"], i["instanceKey"]) for i in json.loads(listed.stdout)}
    # the urgent order by the first rule, the other into the entry agent's shared "orders"
    assert instances == {("worker", "order:18"), ("coordinator", "orders")}
