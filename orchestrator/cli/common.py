"""What every command of the command line shares: how a failure is reported, where the
configuration and the state directory are, how the daemon is asked, and how a command runs
as a process of the swarm.

Kept light, as the parser imports every command module: what a command needs beyond this is
imported when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from goondan.errors import ExitCode
from orchestrator.cli.commands import Command as Command

AnswerT = TypeVar("AnswerT")
DEFAULT_CONFIG = "goondan.yaml"
"""The configuration a command reads when given none."""


def fail(args: argparse.Namespace, code: int, message: str, suggestion: str | None = None) -> int:
    """Report a failure as the command's output calls for (one JSON object on stdout with
    ``--json``, else ``error: ...`` on stderr) and return its exit status."""
    if getattr(args, "json", False):
        error: dict[str, Any] = {"code": ExitCode(code).error_name, "message": message}
        if suggestion:
            error["suggestion"] = suggestion
        print(json.dumps({"error": error, "exitCode": int(code)}))
    else:
        print(f"error: {message}", file=sys.stderr)
        if suggestion:
            print(f"  hint: {suggestion}", file=sys.stderr)
    return int(code)


def bundle_path(args: argparse.Namespace) -> Path:
    """The configuration a command works on: its FILE argument or ``-c/--config`` (the same
    option on every command), else goondan.yaml here. Either may name a bundle directory."""
    given = getattr(args, "file", None)
    config = getattr(args, "config", None)
    if given and config and Path(given) != Path(config):
        raise UsageError(f"two configurations given: {given} and -c {config}")
    return Path(given or config or DEFAULT_CONFIG)


class UsageError(ValueError):
    """A command line that cannot mean anything (exit 2)."""


def log_level(args: argparse.Namespace, one_shot: bool = False) -> str | None:
    """``--log-level`` if given; else ``-v`` debug, ``-q`` error; a one-shot command printing
    to a terminal keeps its answer readable: warning (info with ``-v``)."""
    if getattr(args, "log_level", None):
        return str(args.log_level)
    verbose, quiet = getattr(args, "verbose", 0), getattr(args, "quiet", False)
    if quiet:
        return "error"
    if verbose >= (2 if one_shot else 1):
        return "debug"
    if one_shot and sys.stdout.isatty():
        return "info" if verbose else "warning"
    return None


def serve(
    args: argparse.Namespace,
    process: str,
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
    *,
    one_shot: bool = False,
) -> int:
    """Run ``main(args)`` as a process of the swarm: the ``.env`` files, its logging, a
    private umask, uvloop."""
    from goondan.proctitle import prepare as prepare_process_name

    # Before .env files change the environment, beside which the command line is found.
    prepare_process_name()
    from ipc.logs import configure_logging
    from orchestrator.cli.envfiles import EnvFileMissing, load_env_files
    from orchestrator.cli.terminal import ignore_terminal_stops

    ignore_terminal_stops()  # before any child starts: they inherit it
    path = bundle_path(args)
    env_file = getattr(args, "env_file", None)
    try:
        loaded = load_env_files(path, Path(env_file) if env_file else None)
    except EnvFileMissing as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    level = log_level(args, one_shot)
    if level:
        os.environ["GOONDAN_LOG_LEVEL"] = level  # agent processes inherit it
    configure_logging(level, process=process)
    if loaded.files:
        import structlog

        structlog.get_logger("goondan.cli").info(
            "environment files loaded",
            files=[str(f) for f in loaded.files],
            variables=sorted(loaded.names),  # names only: values never reach a log
        )
    # A daemon's files are its user's alone; agent processes inherit this (and set it again).
    os.umask(0o077)
    from goondan.http_admission import raise_open_file_limit

    raise_open_file_limit()  # each connection costs a descriptor: serve as many as allowed
    try:
        import uvloop

        return uvloop.run(main(args))
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        import asyncio

        return asyncio.run(main(args))


def state_dir_of(args: argparse.Namespace) -> Path:
    """``--state-dir``, else the bundle's directory under ``--state-root`` or
    ``$GOONDAN_STATE_ROOT``, else ``.goondan/`` beside the configuration."""
    from orchestrator.state_dir import resolve_state_dir

    return resolve_state_dir(
        bundle_path(args), state_dir=args.state_dir, state_root=getattr(args, "state_root", None)
    )


class DaemonFailed(Exception):
    """The daemon could not be asked or did not answer; carries the exit code."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def ask_daemon(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    wait_seconds: float | None = None,
    *,
    retries: int = 0,
) -> tuple[int, Any]:
    """The daemon's ``(status, body)`` (on api.sock, or at ``--api-url``); exit 5 (network)
    when none runs, or when it takes the request and never answers; 6 when it wants a token.
    With ``retries``, a request whose answer was lost is sent again that many times at most
    (only safe for one the daemon runs once whatever: one with an ``Idempotency-Key``)."""
    from orchestrator.cli.api_target import TargetError, ask

    for attempt in range(retries + 1):
        try:
            return ask(args, lambda: state_dir_of(args), method, path, body, wait_seconds)
        except TargetError as exc:
            if exc.failure != "no-answer" or attempt == retries:
                raise DaemonFailed(fail(args, exc.exit_code, str(exc))) from exc
    raise AssertionError("unreachable")


def refused(status: int, body: Any) -> bool:
    """Print the API's error and say so, when ``status`` is one."""
    from orchestrator.http.client import error_text

    if status < 400:
        return False
    print(f"error: {error_text(body)}", file=sys.stderr)
    return True


def accepted(args: argparse.Namespace, method: str, path: str) -> Any | None:
    """The daemon's answer when it took the request; ``None`` (error printed) otherwise."""
    asked = ask_daemon(args, method, path)
    if refused(*asked):
        return None
    return asked[1]


def accepted_as(
    args: argparse.Namespace, method: str, path: str, kind: type[AnswerT]
) -> tuple[object, AnswerT] | None:
    """The daemon's answer when it took the request, as it came (what ``--json`` prints) and
    read into ``kind``; ``None`` (error printed) when refused or not understood."""
    answer = accepted(args, method, path)
    if answer is None:
        return None
    typed = read_as(args, answer, kind)
    return None if typed is None else (answer, typed)


def read_as(args: argparse.Namespace, data: object, kind: type[AnswerT]) -> AnswerT | None:
    """``data`` (a body of the daemon's) read into ``kind``; ``None`` (error printed) when it
    is not one: a daemon of another version."""
    import msgspec

    from orchestrator.operations.encoding import convert

    try:
        return convert(data, kind)
    except msgspec.ValidationError as exc:
        fail(args, 1, f"the daemon's answer is not understood: {exc}")
        return None
