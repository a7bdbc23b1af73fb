"""The first hour with the command line, tried as a new user would: --version, init, doctor,
.env files, one spelling of -c, exit statuses, validate --strict/--format, --input-file,
restart --fresh, completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundle import load_bundle
from orchestrator.cli.scaffold import TEMPLATES
from tests.support.daemon import Daemon, run_cli

ROOT = Path(__file__).resolve().parents[3]
KEYLESS = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}


def cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, timeout=120, env=KEYLESS, input=stdin)


def test_version_plain_and_json(tmp_path: Path) -> None:
    plain = cli("--version", cwd=tmp_path)
    assert plain.returncode == 0
    assert plain.stdout.startswith("goondan-py ")
    as_json = cli("--version", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["version"] == plain.stdout.split()[1]


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_validates_and_its_tool_test_passes(tmp_path: Path, template: str) -> None:
    target = tmp_path / "my-swarm"
    made = cli("init", str(target), "--template", template, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"wrote the {template} template's swarm (my-swarm)" in made.stdout
    for name in (
        "goondan.yaml",
        ".env.example",
        ".gitignore",
        "tools/greet.py",
        "tools/test_greet.py",
    ):
        assert (target / name).is_file(), name
    assert "name: my-swarm" in (target / "goondan.yaml").read_text()
    assert load_bundle(target).summary()
    checked = cli("validate", "--strict", cwd=target)
    assert checked.returncode == 0, checked.stderr
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "tools"],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "2 passed" in tested.stdout


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert cli("init", cwd=tmp_path).returncode == 0
    (tmp_path / "goondan.yaml").write_text("# mine\n")
    again = cli("init", cwd=tmp_path)
    assert again.returncode == 2
    assert "goondan.yaml" in again.stderr
    assert "--force" in again.stderr
    assert (tmp_path / "goondan.yaml").read_text() == "# mine\n"
    assert cli("init", "--force", cwd=tmp_path).returncode == 0
    assert "kind: Swarm" in (tmp_path / "goondan.yaml").read_text()


def test_the_offline_template_answers_and_doctor_is_happy(tmp_path: Path) -> None:
    assert cli("init", "my-swarm", "--template", "offline", cwd=tmp_path).returncode == 0
    here = tmp_path / "my-swarm"
    answered = cli("run", "--input", "hi, I am Ada", cwd=here)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "Hello, Ada!"
    doctor = cli("doctor", cwd=here)
    assert doctor.returncode == 0, doctor.stdout
    assert "all is well" in doctor.stdout


def test_with_the_openai_template_and_no_key_doctor_names_it_and_run_exits_6(
    tmp_path: Path,
) -> None:
    assert cli("init", "s", "--template", "openai", cwd=tmp_path).returncode == 0
    here = tmp_path / "s"
    doctor = cli("doctor", "--json", cwd=here)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == report["exitCode"] == 6
    failed = [c for c in report["checks"] if c["level"] == "fail"]
    assert [c["name"] for c in failed] == ["key OPENAI_API_KEY"]
    assert ".env" in failed[0]["fix"]
    run = cli("run", "--input", "hi", cwd=here)
    assert run.returncode == 6
    assert "OPENAI_API_KEY" in run.stderr
    as_json = cli("run", "--input", "hi", "--json", cwd=here)
    assert json.loads(as_json.stdout)["exitCode"] == 6
    assert json.loads(as_json.stdout)["error"]["code"] == "AUTH_ERROR"

    # A key in .env satisfies doctor, and is never printed.
    (here / ".env").write_text("OPENAI_API_KEY=sk-test-not-printed-1234\n")
    fixed = cli("doctor", cwd=here)
    assert fixed.returncode == 0, fixed.stdout
    assert "sk-test-not-printed-1234" not in fixed.stdout + fixed.stderr


def test_env_files_precedence_and_a_missing_env_file(tmp_path: Path) -> None:
    assert cli("init", cwd=tmp_path).returncode == 0
    # A tool of the swarm would see these; doctor shows which files it read.
    (tmp_path / ".env").write_text("GOONDAN_TEST_A=from-env\nGOONDAN_TEST_B=from-env\n")
    (tmp_path / ".env.local").write_text("GOONDAN_TEST_B=from-local\nGOONDAN_TEST_C=from-local\n")
    extra = tmp_path / "extra.env"
    extra.write_text("GOONDAN_TEST_C=from-flag\n")
    from orchestrator.cli.envfiles import load_env_files

    environ = {"GOONDAN_TEST_A": "from-shell", "GOONDAN_TEST_D": "from-shell"}
    loaded = load_env_files(tmp_path / "goondan.yaml", extra, environ)
    assert environ == {
        "GOONDAN_TEST_A": "from-env",
        "GOONDAN_TEST_B": "from-local",
        "GOONDAN_TEST_C": "from-flag",
        "GOONDAN_TEST_D": "from-shell",
    }
    assert [f.name for f in loaded.files] == [".env", ".env.local", "extra.env"]
    missing = cli("run", "--input", "hi", "--env-file", "nope.env", cwd=tmp_path)
    assert missing.returncode == 2
    assert "nope.env" in missing.stderr


def test_exit_statuses_by_meaning(tmp_path: Path) -> None:
    assert cli("run", "--input", "hi", cwd=tmp_path).returncode == 3  # no goondan.yaml here
    (tmp_path / "goondan.yaml").write_text("kind: [unclosed\n")
    assert cli("validate", cwd=tmp_path).returncode == 3  # cannot be parsed
    (tmp_path / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: s}\nspec: {}\n"
    )
    invalid = cli("validate", "--json", cwd=tmp_path)
    assert invalid.returncode == json.loads(invalid.stdout)["exitCode"] == 4
    assert cli("status", cwd=tmp_path).returncode == 5  # no daemon
    assert cli("status", "--no-such-flag", cwd=tmp_path).returncode == 2
    both = cli("validate", "a.yaml", "-c", "b.yaml", cwd=tmp_path)
    assert both.returncode == 2
    assert "two configurations" in both.stderr


def test_validate_strict_and_github_annotations(tmp_path: Path) -> None:
    assert cli("init", cwd=tmp_path).returncode == 0
    text = (tmp_path / "goondan.yaml").read_text()
    unused = (
        "---\napiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: spare}\n"
        "spec: {provider: openai, model: gpt-4o-mini, apiKey: {value: sk-in-the-file}}\n"
    )
    (tmp_path / "goondan.yaml").write_text(text + unused)
    lenient = cli("validate", cwd=tmp_path)
    assert lenient.returncode == 0
    assert "W_CONFIG_UNUSED_RESOURCE" in lenient.stderr
    assert "W_CONFIG_LITERAL_SECRET" in lenient.stderr
    strict = cli("validate", "--strict", cwd=tmp_path)
    assert strict.returncode == 4
    github = cli("validate", "--strict", "--format", "github", cwd=tmp_path)
    assert github.returncode == 4
    lines = github.stdout.splitlines()
    line = text.count("\n") + 4  # the spare Model's `metadata` line
    assert f"::error file=goondan.yaml,line={line},title=W_CONFIG_UNUSED_RESOURCE::" in lines[0]
    assert "Model/spare" in lines[0]
    warnings = cli("validate", "--format", "github", cwd=tmp_path)
    assert warnings.returncode == 0
    assert all(entry.startswith("::warning ") for entry in warnings.stdout.splitlines())


def test_run_input_file_and_one_spelling_of_the_config_option(tmp_path: Path) -> None:
    assert cli("init", "s", cwd=tmp_path).returncode == 0
    (tmp_path / "question.txt").write_text("I am Grace\n")
    from_file = cli("run", "-c", "s/goondan.yaml", "--input-file", "question.txt", cwd=tmp_path)
    assert (from_file.returncode, from_file.stdout.strip()) == (0, "Hello, Grace!")
    from_stdin = cli("run", "s", "--input-file", "-", cwd=tmp_path, stdin="I am Linus")
    assert from_stdin.stdout.strip() == "Hello, Linus!"
    assert (tmp_path / "s" / ".goondan").is_dir()  # the state sits beside the configuration


def test_restart_fresh_forgets_the_agents_conversations(tmp_path: Path) -> None:
    assert cli("init", cwd=tmp_path).returncode == 0
    daemon = Daemon(tmp_path, bundle="goondan.yaml", env=KEYLESS)
    try:
        daemon.wait_for("orchestrator started")
        sent = cli("send", "assistant", "I am Ada", "--instance", "u1", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        keys = {
            r["instanceKey"] for r in json.loads(cli("instances", "--json", cwd=tmp_path).stdout)
        }
        assert "u1" in keys
        plain = cli("restart", "assistant", cwd=tmp_path)
        assert plain.returncode == 0
        assert "u1" in cli("instances", "--json", cwd=tmp_path).stdout
        fresh = cli("restart", "assistant", "--fresh", "--json", cwd=tmp_path)
        assert fresh.returncode == 0, fresh.stderr
        [row] = json.loads(fresh.stdout)["restarted"]
        assert "u1" in row["deletedInstances"]
        assert json.loads(cli("instances", "--json", cwd=tmp_path).stdout) == []
        again = cli("send", "assistant", "I am Bo", cwd=tmp_path)
        assert again.stdout.strip() == "Hello, Bo!"
    finally:
        daemon.stop()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_register_both_spellings(tmp_path: Path, shell: str) -> None:
    done = cli("completion", shell, cwd=tmp_path)
    assert done.returncode == 0
    # `goondan` is registered by name; `python -m orchestrator` through the interpreter's hook
    # (tests/integration/cli/test_completion.py completes words with both).
    if shell == "fish":
        assert "complete --command goondan" in done.stdout
        assert 'test "$words[3]" = orchestrator' in done.stdout
    else:
        assert "_python_argcomplete goondan" in done.stdout
        assert "_python_argcomplete_global" in done.stdout
    if shell == "bash":
        checked = subprocess.run(["bash", "-n"], input=done.stdout, text=True, check=False)
        assert checked.returncode == 0


def test_verbosity_flags_and_doctor_without_a_configuration(tmp_path: Path) -> None:
    assert cli("init", cwd=tmp_path).returncode == 0
    quiet = cli("run", "--input", "I am Ada", "-q", cwd=tmp_path)
    assert quiet.stdout.strip() == "Hello, Ada!"
    assert quiet.stderr == ""  # errors only, and there were none
    loud = cli("run", "--input", "I am Ada", "-vv", cwd=tmp_path)
    levels = {
        json.loads(line)["level"] for line in loud.stderr.splitlines() if line.startswith("{")
    }
    assert "debug" in levels
    plain = cli("run", "--input", "I am Ada", "--no-color", cwd=tmp_path)
    assert "\x1b[" not in plain.stderr + plain.stdout

    empty = tmp_path / "empty"
    empty.mkdir()
    doctor = cli("doctor", "--json", cwd=empty)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == report["exitCode"] == 3
    [problem] = [c for c in report["checks"] if c["level"] == "fail"]
    assert problem["name"] == "configuration"
    assert "init" in problem["fix"]
