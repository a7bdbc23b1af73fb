"""Each ``init`` template answers the command ``init`` tells its user to try, as printed.

The command is read from what ``init`` prints (and must be the one the template's own header
comment gives), never copied here, so the template, its next steps and this test cannot drift
apart. Templates on a real model are run without their key: they must refuse with exit 6 naming
it, which is what a new user sees before filling in ``.env``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import load_bundle
from bundle.keys import PROVIDER_KEY_ENV, key_needs
from orchestrator.cli.scaffold import TEMPLATES
from tests.support.daemon import run_cli

KEYLESS = {k: v for k, v in os.environ.items() if k not in PROVIDER_KEY_ENV.values()}
ANSWERS = {
    "offline": "Hello, Ada!",
    # The coordinator's answer carries the greeter's: the handoff to the other process happened.
    "multi-agent": "The greeter says: Hello, Ada!",
}
"""What the keyless templates answer to the command they advertise."""
RUN_LINE = re.compile(r"python -m orchestrator run --input .*")


def printed_try_command(init_stdout: str) -> str:
    """The shell command among the next steps ``init`` printed that runs the swarm once."""
    commands = [line.strip() for line in init_stdout.splitlines() if RUN_LINE.search(line)]
    assert len(commands) == 1, init_stdout
    return commands[0]


def header_command(goondan_yaml: str) -> str:
    """The ``run --input`` command the template's header comment gives, in backquotes."""
    header = "".join(line for line in goondan_yaml.splitlines(keepends=True) if line[:1] == "#")
    found = re.findall(r"`(python -m orchestrator run --input [^`]+)`", header)
    assert len(found) == 1, header
    return str(found[0])


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a user types it, with this interpreter first on PATH as ``python``."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**KEYLESS, "PATH": f"{bin_dir}{os.pathsep}{KEYLESS.get('PATH', '')}"}
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_command_init_advertises_answers(tmp_path: Path, template: str) -> None:
    made = run_cli("init", "my-swarm", "--template", template, cwd=tmp_path, env=KEYLESS)
    assert made.returncode == 0, made.stderr
    command = printed_try_command(made.stdout)
    here = tmp_path / "my-swarm"
    assert command.endswith(header_command((here / "goondan.yaml").read_text()))

    ran = shell(command, tmp_path)

    needs = key_needs(load_bundle(here))
    if template in ANSWERS:
        assert not needs, f"{template} is meant to run with no key"
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == ANSWERS[template]
    else:
        assert needs, f"add {template}'s expected answer to ANSWERS"
        assert ran.returncode == 6, ran.stderr
        for need in needs:
            assert need.variable in ran.stderr
        assert ran.stdout == ""
