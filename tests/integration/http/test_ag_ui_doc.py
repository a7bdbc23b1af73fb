"""docs/front-doors/ag-ui.md's client snippet, run as written against a daemon started with
the page's own command (the example swarm, on a free port in place of 8080)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.walkthrough import Shell

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "front-doors" / "ag-ui.md"
PAGE_PORT = "127.0.0.1:8080"


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    """A terminal in a directory holding the repository's example swarm."""
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml.example")
    terminal = Shell(tmp_path)
    try:
        yield terminal
    finally:
        terminal.close()


def test_the_client_snippet_approves_and_gets_the_answer(shell: Shell) -> None:
    [command] = [
        c.text
        for c in readme.section("AG-UI", PAGE).blocks_of("sh")[0].commands()
        if c.text.startswith("python ")
    ]
    [snippet] = readme.section("A client", PAGE).blocks_of("python")
    daemon = shell.start(command.replace(PAGE_PORT, "127.0.0.1:0"))
    port = daemon.json_event("http api listening")["port"]
    shell.substitutions.append((PAGE_PORT, f"127.0.0.1:{port}"))
    daemon.json_event("agent ready", agent="coordinator")
    done = shell.run(f"python - <<'PY'\n{snippet.text}PY")
    assert done.returncode == 0, done.stderr
    assert "[calling bash__exec]" in done.stdout
    assert "approving: worker asks to call bash__exec {'command': 'echo hello from ag-ui'}" in (
        done.stdout
    )
    assert done.stdout.rstrip().endswith("RUN_FINISHED hello from ag-ui")
    assert daemon.stop() == 0, daemon.text[-4000:]
