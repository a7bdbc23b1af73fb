"""Shell completion, as a shell runs it: the command line itself, by argcomplete's protocol
(``_ARGCOMPLETE``, ``COMP_LINE``, ``COMP_POINT``; the words written to the file named by
``_ARGCOMPLETE_STDOUT_FILENAME``), and in a real bash that sourced ``completion bash``.

Agent names, instance keys and approval ids come from a state directory; no daemon runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.defaults import INSTANCE_METADATA_FORMAT
from tests.support.daemon import run_cli

pytestmark = pytest.mark.timeout(120)

APPROVAL_ID = "apr_0123456789abcdef"
BIN = Path(sys.executable).parent


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """Two agents; the worker's instance `default` has a call waiting for approval."""
    state = tmp_path / "state"
    instance = state / "agents" / "worker" / "instances" / "default"
    (instance / "approvals").mkdir(parents=True)
    (state / "agents" / "coordinator" / "instances").mkdir(parents=True)
    metadata = {"formatVersion": INSTANCE_METADATA_FORMAT, "agentName": "worker"}
    (instance / "metadata.json").write_text(json.dumps({**metadata, "instanceKey": "default"}))
    approval = {
        "approvalId": APPROVAL_ID,
        "status": "pending",
        "agentName": "worker",
        "instanceKey": "default",
        "toolName": "bash__exec",
        "expiresAtUnix": 32472144000,
    }
    (instance / "approvals" / f"{APPROVAL_ID}.json").write_text(json.dumps(approval))
    return state


def completions(line: str, tmp_path: Path) -> list[str]:
    """The words the command line offers for the end of ``line`` (``goondan ...`` or
    ``python -m orchestrator ...``), as the shell's hook asks for them."""
    out = tmp_path / "completions"
    skip = "3" if line.startswith("python -m ") else "1"  # words before the program's own
    env = {
        **os.environ,
        "_ARGCOMPLETE": skip,
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # nothing but the answer, and that on its own channel
    text = out.read_text()
    return [word.rstrip(" ") for word in text.split("\v")] if text else []


def test_both_spellings_complete_agents_instances_and_approval_ids(
    state: Path, tmp_path: Path
) -> None:
    where = f"--state-dir {state}"
    assert completions(f"python -m orchestrator approve {where} ", tmp_path) == [APPROVAL_ID]
    assert completions(f"goondan reject {where} apr_0", tmp_path) == [APPROVAL_ID]
    assert completions(f"goondan send {where} ", tmp_path) == ["coordinator", "worker"]
    assert completions(f"python -m orchestrator logs {where} --agent w", tmp_path) == ["worker"]
    assert completions("goondan run --instance d", tmp_path) == []  # no state here: quiet
    assert completions(f"goondan send {where} --instance ", tmp_path) == ["default"]
    assert completions(f"goondan instances {where} delete worker ", tmp_path) == ["default"]
    assert completions("goondan appr", tmp_path) == ["approvals", "approve"]


def test_a_bash_that_sourced_the_script_completes_both_spellings(
    state: Path, tmp_path: Path
) -> None:
    script = run_cli("completion", "bash", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    (tmp_path / "completion.bash").write_text(script.stdout)
    probe = f"""
source {tmp_path / "completion.bash"}
COMP_WORDS=(python -m orchestrator approve --state-dir {state} "")
COMP_CWORD=6
COMP_LINE="python -m orchestrator approve --state-dir {state} "
COMP_POINT=${{#COMP_LINE}}
_python_argcomplete_global python
echo "module: ${{COMPREPLY[*]}}"
COMP_WORDS=(goondan send --state-dir {state} "")
COMP_CWORD=4
COMP_LINE="goondan send --state-dir {state} "
COMP_POINT=${{#COMP_LINE}}
_python_argcomplete goondan
echo "script: ${{COMPREPLY[*]}}"
"""
    # The interpreter and the console script of this environment come first on the PATH, as
    # in an activated virtualenv.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"module: {APPROVAL_ID}", "script: coordinator worker"]
