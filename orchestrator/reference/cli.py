"""``reference/cli.md``: every command and flag of ``goondan`` (``python -m orchestrator``),
from the argument parser itself, each command with an example taken from the documentation's
walkthroughs (which the tests run)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from orchestrator.cli.parser import build_parser
from orchestrator.reference.markdown import table

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
"""Where a command's example is looked for."""
SHARED = frozenset({"-h", "-v", "-q", "--no-color"})
"""Options every command takes: listed once, at the top."""
COMMAND_LINE = re.compile(r"^\s*(?:python -m orchestrator|goondan) ([a-z-]+)\b.*$", re.MULTILINE)


def cli_page() -> str:
    """The page: the global options, then a section per command."""
    parser = build_parser()
    examples = _examples()
    parts = [
        "# Command line\n\n",
        "`goondan` (or `python -m orchestrator`): every command and option, generated from the "
        "argument parser (`goondan COMMAND --help` prints the same). "
        f"{parser.epilog}\n\n",
        "## Options of every command\n\n",
        _options(parser, extra=_any_command(parser)),
    ]
    for name, sub in _commands(parser):
        parts.append(f"\n## `{name}`\n\n")
        summary = _summary(parser, name)
        if summary:
            parts.append(f"{summary[0].upper()}{summary[1:]}.\n\n")
        usage = sub.format_usage().removeprefix("usage: ").strip()
        parts.append(f"```\n{' '.join(usage.split())}\n```\n\n")
        parts.append(_options(sub, skip=SHARED))
        example = examples.get(name)
        if example is not None:
            parts.append(f"\nFor example:\n\n```sh\n{example}\n```\n")
    return "".join(parts)


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return sorted(action.choices.items())
    return []


def _summary(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return " ".join((choice.help or "").split())
    return ""


def _any_command(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    return _commands(parser)[0][1]


def _options(
    parser: argparse.ArgumentParser,
    *,
    skip: frozenset[str] = frozenset(),
    extra: argparse.ArgumentParser | None = None,
) -> str:
    """The table of ``parser``'s arguments less ``skip`` (and ``extra``'s shared options)."""
    rows = []
    shared = [a for a in (extra._actions if extra else []) if set(a.option_strings) & SHARED]
    for action in [*parser._actions, *shared]:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if set(action.option_strings) & skip:
            continue
        if extra is not None and action in shared and "-h" in action.option_strings:
            continue
        rows.append((_spelling(action), _default(action), action.help or ""))
    return table(("argument", "default", "what it does"), rows)


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`" + ("" if action.required else " (optional)")
    value = ""
    if action.nargs != 0:
        metavar = action.metavar or action.dest.upper()
        value = f" {'|'.join(action.choices) if action.choices else metavar}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    default = action.default
    if default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{default}`"


def _examples() -> dict[str, str]:
    """The first line running each command in the documentation's pages."""
    found: dict[str, str] = {}
    for page in PAGES:
        for match in COMMAND_LINE.finditer(page.read_text()):
            line = match.group(0).strip()
            found.setdefault(match.group(1), line.split("  #", 1)[0].rstrip())
    return found
