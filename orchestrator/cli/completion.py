"""Shell completion of the command line, by argcomplete: commands and options from the parser,
and the names only this machine knows (agents, instance keys, approval ids) from the state
directory, so completion never needs a running daemon.

The shell runs the command line itself to complete a word (argcomplete's protocol: ``_ARGCOMPLETE``,
``COMP_LINE`` and ``COMP_POINT`` in the environment, the words written to descriptor 8 or to
``_ARGCOMPLETE_STDOUT_FILENAME``). ``completion SHELL`` prints what to source: the registration
of ``goondan``, and for ``python -m orchestrator`` argcomplete's hook for Python interpreters,
which completes ``python -m MODULE`` for a module marked ``PYTHON_ARGCOMPLETE_OK``
(``orchestrator/__main__.py`` is).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

COMMAND = "goondan"
"""The console script's name."""
MODULE = "orchestrator"
"""What ``python -m`` runs."""

Completer = Callable[..., Iterable[str]]


def requested() -> bool:
    """Whether the shell runs this process to complete a word."""
    return "_ARGCOMPLETE" in os.environ


def command_completed() -> str | None:
    """The command whose arguments a completion needs, as :func:`~orchestrator.cli.commands.
    command_in` tells from the words before the one being completed (``None``: every
    command's, when the environment does not say them plainly)."""
    from orchestrator.cli.commands import command_in

    try:
        point = int(os.environ.get("COMP_POINT", ""))
        programs = int(os.environ.get("_ARGCOMPLETE", ""))  # 1: goondan, 3: python -m orchestrator
    except ValueError:
        return None
    line = os.environ.get("COMP_LINE", "")[:point]
    words = line.split()
    if line and not line[-1].isspace():
        words = words[:-1]  # the word being completed: a command's name, maybe
    return command_in(words[programs:])


def complete(parser: argparse.ArgumentParser, state_dir: Callable[[Any], Path]) -> NoReturn:
    """Write the completions of the word the shell asks about and exit (argcomplete's side of
    the protocol). ``state_dir(parsed_args)`` locates the state the names are read from."""
    import argcomplete

    _attach(parser, state_dir)
    argcomplete.autocomplete(parser, always_complete_options=False)
    # argcomplete exits when it answers; reaching here means the environment asked nothing
    # it could answer: end quietly rather than run a command the user never confirmed.
    os._exit(1)


def script(shell: str) -> str:
    """What to source in ``shell`` (bash, zsh, fish) to complete both spellings."""
    from argcomplete.shell_integration import shellcode

    own = shellcode([COMMAND], shell=shell)
    if shell == "fish":
        return own + _FISH_MODULE
    from importlib import resources  # here: 12 ms a completion call would pay for nothing

    hook = resources.files("argcomplete").joinpath("bash_completion.d", "_python-argcomplete")
    return (
        own
        + "\n# `python -m orchestrator`: argcomplete's hook for Python interpreters\n"
        + (hook.read_text())
    )


# fish has no hook for interpreters: complete `python -m orchestrator ...` by the same protocol,
# the first two words (`python -m`) skipped (_ARGCOMPLETE=3).
_FISH_MODULE = r"""
function __fish_python_m_orchestrator_wanted
    set -l words (commandline -opc)
    test (count $words) -ge 3; and test "$words[2]" = -m; and test "$words[3]" = orchestrator
end
function __fish_python_m_orchestrator_complete
    set -l words (commandline -opc)
    set -lx _ARGCOMPLETE 3
    set -lx _ARGCOMPLETE_DFS \t
    set -lx _ARGCOMPLETE_IFS \n
    set -lx _ARGCOMPLETE_SUPPRESS_SPACE 1
    set -lx _ARGCOMPLETE_SHELL fish
    set -lx COMP_LINE (commandline -p)
    set -lx COMP_POINT (string length (commandline -cp))
    set -lx COMP_TYPE
    $words[1] -m orchestrator 8>&1 9>&2 1>/dev/null 2>&1
end
for python in python python3
    complete --command $python -n __fish_python_m_orchestrator_wanted -f \
        -a '(__fish_python_m_orchestrator_complete)'
end
"""


def _attach(parser: argparse.ArgumentParser, state_dir: Callable[[Any], Path]) -> None:
    """Give the arguments that name agents, instances or approvals their completers."""
    names = Names(state_dir)
    by_dest: dict[str, Completer] = {
        "agent": names.agents,
        "instance": names.instances,
    }
    for command, sub in _subcommands(parser):
        for action in sub._actions:
            completer = by_dest.get(action.dest)
            if command in ("approve", "reject") and action.dest == "id":
                completer = names.approvals
            elif command in ("instances", "instance") and action.dest == "words":
                completer = names.instance_words
            if completer is not None:
                action.completer = completer  # type: ignore[attr-defined]


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterable[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


class Names:
    """What the state directory knows, as completers: each answers the words starting with the
    prefix typed, and nothing (never an error) when the state cannot be read."""

    def __init__(self, state_dir: Callable[[Any], Path]) -> None:
        self.state_dir = state_dir

    def _state(self, parsed_args: Any) -> Path | None:
        try:
            return self.state_dir(parsed_args)
        except Exception:  # a half-typed command line: complete nothing rather than fail
            return None

    def agents(self, prefix: str, parsed_args: Any = None, **_: Any) -> list[str]:
        """Agents that have instances on disk (``<state>/agents/NAME``)."""
        state = self._state(parsed_args)
        if state is None:
            return []
        try:
            found = sorted(p.name for p in (state / "agents").iterdir() if p.is_dir())
        except OSError:
            return []
        return [name for name in found if name.startswith(prefix)]

    def instances(self, prefix: str, parsed_args: Any = None, **_: Any) -> list[str]:
        """Instance keys (of ``--agent``/the agent named, when one is)."""
        from orchestrator.metadata_rows import metadata_row
        from orchestrator.state_dir import list_instances

        state = self._state(parsed_args)
        if state is None:
            return []
        agent = getattr(parsed_args, "agent", None) or None
        try:
            rows = list_instances(state, agent)
        except OSError:
            return []
        read = [metadata_row(row) for row in rows]
        keys = {str(row.instance_key) for row in read if row.instance_key}
        return sorted(key for key in keys if key.startswith(prefix))

    def approvals(self, prefix: str, parsed_args: Any = None, **_: Any) -> list[str]:
        """Ids of the approvals waiting for a decision."""
        from orchestrator.approvals import list_approvals

        state = self._state(parsed_args)
        if state is None:
            return []
        try:
            rows = list_approvals(state)
        except OSError:
            return []
        return [r.approval_id for r in rows if r.approval_id.startswith(prefix)]

    def instance_words(self, prefix: str, parsed_args: Any = None, **_: Any) -> list[str]:
        """``instances [AGENT] | delete AGENT KEY | restart [AGENT] KEY``, word by word."""
        words = list(getattr(parsed_args, "words", None) or [])
        if not words:
            actions = [a for a in ("delete", "restart") if a.startswith(prefix)]
            return actions + self.agents(prefix, parsed_args)
        if words[0] == "delete" and len(words) == 1:
            return self.agents(prefix, parsed_args)
        if words[0] in ("delete", "restart"):
            scoped = argparse.Namespace(**vars(parsed_args))
            scoped.agent = words[1] if len(words) > 1 else None
            return self.instances(prefix, scoped)
        return []
