"""docs/concepts/cluster.md's commands, run as written on one machine standing for both hosts:
the official ``nats-server`` with ``examples/cluster/nats.conf``, a leader and a node of the
example's relay swarm, and a request that the node answers.

Only what must change is changed: the config's port (4222) and the page's ``host1:4222`` are
a free loopback port, ``/var/lib/...`` directories are under the test's folder, each ``...``
is a secret of the test's own. Without ``nats-server`` the test skips loudly, unless
``GOONDAN_REQUIRE_NATS=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.cluster import free_port, nats_server_binary, password_variable
from tests.support.walkthrough import Shell

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "cluster"
THIS = "tests/integration/docs/test_cluster_page.py"
USERS = ("leader", "standby", "node-a", "node-b", "node-c")
"""The users of examples/cluster/nats.conf."""


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    """A terminal in a folder holding the cluster example's swarm and server configuration."""
    nats_server_binary()  # skips (or fails in CI) without it
    shutil.copy(EXAMPLE / "goondan.yaml", tmp_path / "goondan.yaml")
    shutil.copy(EXAMPLE / "nats.conf", tmp_path / "nats.conf")
    terminal = Shell(tmp_path)
    try:
        yield terminal
    finally:
        terminal.close()


def test_a_leader_and_a_node_as_the_page_starts_them(shell: Shell, tmp_path: Path) -> None:
    [block] = readme.blocks_for(THIS, "test_a_leader_and_a_node_as_the_page_starts_them")
    port = free_port()
    config = tmp_path / "nats.conf"
    config.write_text(re.sub(r"(?m)^port: 4222$", f"port: {port}", config.read_text()))
    secrets = {user: f"{user}-password" for user in USERS}
    shell.substitutions += [
        ("host1:4222", f"127.0.0.1:{port}"),
        ("/var/lib/nats", str(tmp_path / "nats")),
        ("/var/lib/goondan", str(tmp_path / "node-a")),
        ("GOONDAN_CLUSTER_KEY=...", "GOONDAN_CLUSTER_KEY=a-shared-key-of-32-characters-00"),
        *(
            (f"{password_variable(u)}=...", f"{password_variable(u)}={pw}")
            for u, pw in secrets.items()
        ),
        *(
            (f"USER={user} GOONDAN_NATS_PASSWORD=...", f"USER={user} GOONDAN_NATS_PASSWORD={pw}")
            for user, pw in secrets.items()
        ),
    ]
    leader = node = None
    answered = ""
    for command in block.commands():
        text = shell.prepare(command.text)
        where = f"{block.page}:{command.line}"
        assert "..." not in text, f"{where}: a placeholder left: {text}"
        if text.startswith("export "):
            shell.env.update(readme.exported(text))
        elif "nats-server " in text:
            shell.start(text).read_until("Server is ready")
        elif " run goondan.yaml --cluster " in text:
            leader = shell.start(text, exec_=False)
            leader.json_event("agent ready", agent="front", deadline=120)
        elif " node goondan.yaml " in text:
            assert leader is not None, where
            node = shell.start(text, exec_=False)
            leader.json_event("node joined", node="node-a", deadline=120)
        else:
            done = shell.run(text)
            assert done.returncode == 0, f"{where}\n{done.stderr}"
            answered = done.stdout
    assert answered.strip() == "middle here"
    assert node is not None
    node.json_event("turn finished", agent="middle", status="ok")  # placed on node-a: ran there
