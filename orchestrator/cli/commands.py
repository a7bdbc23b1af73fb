"""What the argument parser needs beside its declarations, kept to what ``--help`` must
import: the commands by name, each one's function named by where it lives (its module, and
all that imports, loads only when the command runs), and an ``argparse`` parser that sizes
its help to the terminal without importing ``shutil`` (and the compression modules it
imports)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]
"""What runs a command: its parsed arguments in, its exit status out (``typing`` is not
imported for less: ``--help`` imports nothing it does not use)."""

NO_COMMAND = ""
"""What :func:`command_in` answers for words that run no command (``--help``, ``--version``,
a misspelt command): the parser builds no command's arguments for them."""


class LazyCommand:
    """A command's function, named ``module:function``, imported when the command runs."""

    __slots__ = ("module", "name")

    def __init__(self, where: str) -> None:
        self.module, _, self.name = where.partition(":")

    def resolve(self) -> Command:
        """The function itself (its module imported)."""
        # __import__, not importlib.import_module: only the former is what -X importtime
        # reports, and a command's imports are what an operator looks at it for.
        __import__(self.module)
        found: Command = getattr(sys.modules[self.module], self.name)
        return found

    def __call__(self, args: argparse.Namespace) -> int:
        return self.resolve()(args)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LazyCommand):
            return NotImplemented
        return (self.module, self.name) == (other.module, other.name)

    def __hash__(self) -> int:
        return hash((self.module, self.name))

    def __repr__(self) -> str:
        return f"LazyCommand('{self.module}:{self.name}')"


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser``, whose help is as wide as the terminal (``$COLUMNS``, else
    the terminal's, else 80 columns, as ``shutil.get_terminal_size`` says it) without
    importing ``shutil``: argparse does at every argument added. Its subcommands' parsers are
    of this class too."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        if self.formatter_class is not argparse.HelpFormatter:
            return super()._get_formatter()
        return argparse.HelpFormatter(prog=self.prog, width=terminal_columns() - 2)


def terminal_columns() -> int:
    """The terminal's width: ``$COLUMNS``, else standard output's terminal's, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def command_in(words: Sequence[str]) -> str | None:
    """The command ``words`` name: the first word that is not an option (the options before
    a command take no value), when it is one; :data:`NO_COMMAND` when they name none, or ask
    for help before it (help is printed before the command is looked at); ``None`` (build
    every command) past ``--``, whose meaning is argparse's to decide."""
    for word in words:
        if word == "--":
            return None
        if word == "-h" or (len(word) > 2 and "--help".startswith(word)):
            return NO_COMMAND
        if not word.startswith("-"):
            return word if word in COMMANDS else NO_COMMAND
    return NO_COMMAND


COMMANDS = frozenset(
    {
        "validate",
        "run",
        "node",
        "status",
        "usage",
        "send",
        "restart",
        "requests",
        "cancel",
        "instances",
        "instance",
        "approvals",
        "approve",
        "reject",
        "mcp",
        "logs",
        "studio",
        "schema",
        "init",
        "doctor",
        "package",
        "tool",
        "completion",
        "test",
    }
)
"""Every command name (a test checks it against the parser's)."""
