"""docs/front-doors/mcp.md's Python client, run as written against a real daemon process
started as the page says (the offline example swarm, on a TCP listener with a token)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import readme
from tests.support.daemon import Daemon, free_port

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "front-doors" / "mcp.md"


def test_the_python_client_of_the_mcp_page(tmp_path: Path) -> None:
    section = readme.section("A client in Python", PAGE)
    [snippet] = section.blocks_of("python")
    [commands] = section.blocks_of("sh")
    run = [c.text for c in commands.commands() if c.text.startswith("python -m orchestrator run")]
    assert run == [
        "python -m orchestrator run goondan.yaml --listen 127.0.0.1:8080 "
        "--api-token-env GOONDAN_API_TOKEN"
    ]
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    port = free_port()  # the page's 8080, moved so tests running at once do not collide
    token = {"GOONDAN_API_TOKEN": "docs-token"}
    daemon = Daemon(
        tmp_path,
        bundle="goondan.yaml",
        args=["--listen", f"127.0.0.1:{port}", "--api-token-env", "GOONDAN_API_TOKEN"],
        env=token,
    )
    try:
        daemon.wait_for("orchestrator started")
        done = subprocess.run(
            [sys.executable, "-"],
            input=snippet.text,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
            env={**os.environ, **token, "GOONDAN_MCP_URL": f"http://127.0.0.1:{port}/mcp"},
        )
    finally:
        daemon.stop()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "coordinator: The coordinator agent of the default swarm." in lines
    assert any(line.startswith("  ... accepted as request req_") for line in lines)
    assert any(
        line.startswith("Done. The worker reports: wrote 11 bytes to notes.txt | request req_")
        for line in lines
    )
    [asked] = [line for line in lines if line.startswith("asked: ")]
    assert "worker wants to call bash__exec" in asked
    assert lines[-1].startswith("worker: ")  # the shell's output (or why the sandbox refused)
