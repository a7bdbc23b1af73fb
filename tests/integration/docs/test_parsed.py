"""The site's lists of commands (docs/guides/cli.md's overview, docs/guides/packages.md's and
docs/guides/studio.md's), each command parsed by goondan's own argument parser.

They are not run: they hold placeholders (``TRACE_OR_REQUEST_ID``, ``@acme/tools``), daemons
left running, a terminal UI and a browser tab. Parsing them proves what drifts most: every
command, option and argument they show exists and takes what they give it. Optional parts
written ``[--args '...']`` are parsed with the part given.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from orchestrator.cli.parser import build_parser
from orchestrator.reference import cli_page
from tests.support import readme
from tests.support.readme import PageBlock

THIS = "tests/integration/docs/test_parsed.py"
PROGRAMS = (("python", "-m", "orchestrator"), ("goondan",))
OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


def arguments(command: str) -> list[str] | None:
    """The words goondan gets from ``command``, or ``None`` when it runs another program
    (``cp``, ``export``, ...). A redirection and what follows it are the shell's."""
    words = shlex.split(OPTIONAL.sub(r"\1", command))
    for program in PROGRAMS:
        if tuple(words[: len(program)]) == program:
            words = words[len(program) :]
            break
    else:
        return None
    return words[: words.index(">")] if ">" in words else words


def parse_error(words: list[str]) -> str | None:
    """What the parser says of ``words``, when it refuses them."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
        try:
            build_parser().parse_args(words)
        except SystemExit as exc:
            return f"exit {exc.code}: {said.getvalue().strip()}"
    return None


BLOCKS = readme.blocks_for(THIS, "test_the_command_lists_parse", fate="parsed")


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_the_command_lists_parse(block: PageBlock) -> None:
    parsed = 0
    for command in block.commands():
        words = arguments(command.text)
        if words is None:
            continue
        assert parse_error(words) is None, (f"{block.page}:{command.line}", parse_error(words))
        parsed += 1
    assert parsed >= 3


def test_a_command_the_parser_does_not_know_is_caught() -> None:
    assert parse_error(["run", "goondan.yaml", "--no-such-option"]) is not None
    assert parse_error(["approvals", "--all"]) is None
    assert arguments("python -m orchestrator schema > goondan.schema.json") == ["schema"]
    assert arguments("python -m orchestrator usage [--trace ID]") == ["usage", "--trace", "ID"]


def test_the_examples_of_the_generated_command_reference_parse() -> None:
    """docs/reference/cli.md is written by the site's build; its examples (the first line of
    each command in the guides) parse too, and its other blocks are the parser's own usage."""
    blocks = readme.page_blocks("docs/reference/cli.md", cli_page())
    examples = [b for b in blocks if b.lang == "sh"]
    assert len(examples) >= 10
    for block in examples:
        [command] = block.commands()
        words = arguments(command.text)
        assert words is not None, command.text
        assert parse_error(words) is None, (command.text, parse_error(words))
    assert {b.lang for b in blocks} == {"sh", ""}
