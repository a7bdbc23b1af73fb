"""`run --cluster` against a cluster nobody serves: a child process of the CLI."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.daemon import run_cli
from tests.support.swarm import write_swarm


def test_an_unreachable_cluster_is_an_error_naming_it_without_its_password(
    tmp_path: Path,
) -> None:
    path = write_swarm(tmp_path)
    done = run_cli(
        "run",
        str(path),
        "--cluster",
        "nats://admin:hunter2@127.0.0.1:9",  # the discard port: nothing listens
        cwd=tmp_path,
        env={**os.environ, "GOONDAN_CLUSTER_KEY": "k" * 32},
    )
    assert done.returncode == 5  # network
    assert "cannot connect to the cluster at nats://admin:***@127.0.0.1:9" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout
