"""One child of the agents' fork server, in a fresh interpreter, asked what it finds at its start.

A test process may already run a fork server of its own (started by an earlier test with other
settings), so each probe starts a new interpreter, whose first child starts a fork server with
the runtime's preload, exactly as the daemon's does.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FORK_ONE = """
from orchestrator.transport import MultiprocessingTransport
import probe

context = MultiprocessingTransport().context
parent, child = context.Pipe()
process = context.Process(target=probe.report, args=(child,))
process.start()
child.close()
print(repr(parent.recv()))
process.join(30)
"""


def fork_one_child(directory: Path, probe: str) -> Any:
    """What ``report(conn)`` of the module ``probe`` (its source, written to ``directory``)
    sends from a child of a fresh fork server: a Python literal, read back."""
    (directory / "probe.py").write_text(probe)
    done = subprocess.run(
        [sys.executable, "-c", FORK_ONE],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), *sys.path])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())
