"""The CLI builds the command given only (none for --help), and parses exactly as in full."""

from __future__ import annotations

import argparse
import contextlib
import sys

import pytest

from orchestrator.cli.parser import COMMANDS, NO_COMMAND, build_parser, command_in


def test_the_command_names_are_the_parsers() -> None:
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert set(subparsers.choices) == COMMANDS


@pytest.mark.parametrize(
    "words",
    [
        ["status", "--json"],
        ["--debug", "status", "-c", "x.yaml", "--state-dir", "s"],
        ["--json", "--deb", "status"],
        ["send", "beta", "hello there", "--instance", "u1", "--timeout", "5"],
        ["run", "goondan.yaml", "--input", "hi", "--watch"],
        ["run", "goondan.yaml", "--cluster", "nats://h:4222", "--heartbeat-seconds", "0.5"],
        ["node", "goondan.yaml", "--name", "gpu-1", "--cluster", "nats://h:4222"],
        ["logs", "-f", "--agent", "beta"],
        ["approve", "apr_1", "--args", "{}", "--wait"],
        ["instances", "delete", "beta", "k"],
        ["schema"],
    ],
)
def test_a_command_parses_as_with_every_command_built(words: list[str]) -> None:
    only = command_in(words)
    assert only is not None
    assert vars(build_parser(only).parse_args(words)) == vars(build_parser().parse_args(words))


@pytest.mark.parametrize(
    "words", [[], ["--help"], ["nonsense"], ["--debug"], ["--he", "status"], ["-h", "send", "x"]]
)
def test_no_command_named_builds_none(words: list[str]) -> None:
    assert command_in(words) == NO_COMMAND


def test_past_a_double_dash_every_command_is_built() -> None:
    assert command_in(["--", "status"]) is None


@pytest.mark.parametrize("words", [["--help"], ["--version"], ["nonsense"], ["--he", "status"]])
def test_without_a_command_every_command_is_listed_as_in_full(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for only in (command_in(words), None):
        with pytest.raises(SystemExit) if words != ["--version"] else _nothing():
            build_parser(only).parse_args(words)
        outputs.append(capsys.readouterr())
    assert outputs[0] == outputs[1]


def _nothing() -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


@pytest.mark.parametrize(
    ("argv0", "usage"),
    [
        ("/usr/local/bin/goondan", "usage: goondan "),
        ("/x/orchestrator/__main__.py", "usage: python -m orchestrator "),
    ],
)
def test_usage_names_the_command_as_it_was_called(
    monkeypatch: pytest.MonkeyPatch, argv0: str, usage: str
) -> None:
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    assert build_parser().format_usage().startswith(usage)
