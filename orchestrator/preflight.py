"""``run`` and ``node`` check the configuration as ``validate`` does before they start anything.

A configuration ``validate`` refuses would start, and its agent would fail to boot and be
retried forever. So the daemon gets ``validate``'s verdict first (the same checks: every Tool
and Extension module imported, every Connection's config checked by its Connector's module,
every Model's provider) and refuses to start on an error, with ``validate``'s exit status.

``validate`` runs its checks in a fresh interpreter, which costs the interpreter's start and
the runtime's imports again (about half a second). The daemon has a process with all of that
loaded anyway: the fork server its agents are forked from (``orchestrator._forkserver``). The
check runs in a child forked from it, so it costs about the time of the checks themselves, and
the fork server it starts is the one the agents then start from at once. The child imports the
configuration's own modules after the fork, never the fork server: an edited module is
imported again by the next check (``run --watch``) and by every agent.

As in ``validate``, only an explicit verdict counts: a child that ends without one (a module
calling ``os._exit`` at import) or gives none in time (a module that loops) fails the check,
and a child still running is killed. The child dies with the fork server, which dies with the
daemon.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import multiprocessing.forkserver
import os
import sys
from collections.abc import Awaitable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# Imported with this module, never by the checking thread: two threads importing the
# runtime's modules at once (the daemon loads the bundle meanwhile) can deadlock on import
# locks.
from orchestrator.environment import use_clean_launches
from orchestrator.transport import PRELOAD
from orchestrator.validation import (
    die_with_parent,
    ended_without_verdict,
    timed_out,
    validate_in_child,
    validate_timeout,
    verdict_of,
)

CHECK_PROCESS_NAME = "goondan-validate"
"""The ``multiprocessing`` name of the child that checks the configuration."""
_EXIT_GRACE_SECONDS = 5.0
"""How long a child that gave its verdict may take to exit before it is killed."""


def check_soon(path: Path) -> asyncio.Future[dict[str, Any]]:
    """:func:`preflight_verdict` on ``path``, from a thread that starts now: the daemon loads
    the configuration meanwhile."""
    return asyncio.get_running_loop().run_in_executor(None, preflight_verdict, path)


async def refusal(path: Path, checking: Awaitable[dict[str, Any]], *, as_json: bool) -> int | None:
    """Before ``run`` or ``node`` starts anything: ``validate``'s errors, printed as it prints
    them (with ``as_json``, one object: ``error``, ``errors``, ``exitCode``), and its exit
    status (3 or 4); ``None`` when it finds none (warnings do not stop a start).

    This comes before credentials and secrets (exit 6): those are looked up in a configuration
    that has to be right first.
    """
    from goondan.errors import ExitCode
    from orchestrator.validation import config_exit, config_issue

    verdict = await checking
    errors = list(verdict.get("errors") or [])
    if not errors:
        return None
    code = config_exit(errors)
    counted = f"{len(errors)} error{'s' if len(errors) != 1 else ''} in {path}"
    if as_json:
        error = {"code": ExitCode(code).error_name, "message": counted}
        print(json.dumps({"error": error, "errors": errors, "exitCode": code}))
        return code
    for issue in errors:
        print(config_issue(issue).format(), file=sys.stderr)
    print(counted, file=sys.stderr)
    return code


def preflight_verdict(path: Path, *, timeout: float | None = None) -> dict[str, Any]:
    """``validate``'s verdict on ``path`` (``{valid, errors, warnings?, summary?}``, each issue
    in its JSON form), found in a child of the fork server within ``timeout`` seconds
    (``GOONDAN_VALIDATE_TIMEOUT``, as ``validate``).

    Blocks: call it from a thread. Where the fork server cannot start, the check runs as
    ``validate`` runs it, in a fresh interpreter.
    """
    timeout = validate_timeout() if timeout is None else timeout
    path = path.absolute()
    # As the transport sets it up (idempotent): the fork server is the agents' one, exec'd
    # with no secret in its environment, the runtime preloaded.
    use_clean_launches()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    verdicts, child_end = context.Pipe(duplex=False)
    # The child gets the whole environment, as `validate` does: a module may read a variable
    # when it is imported. It lives only for the check.
    process = context.Process(
        target=_check,
        args=(str(path), dict(os.environ), child_end),
        name=CHECK_PROCESS_NAME,
        daemon=True,
    )
    try:
        process.start()
    except OSError:
        verdicts.close()
        return validate_in_child(path, check_handlers=True, timeout=timeout)
    finally:
        child_end.close()
    try:
        if not verdicts.poll(timeout):
            process.kill()
            process.join()
            return timed_out(path, timeout)
        try:
            answer = json.loads(verdicts.recv_bytes())
        except (EOFError, ValueError):
            answer = None
    finally:
        verdicts.close()
    process.join(_EXIT_GRACE_SECONDS)
    if process.exitcode is None:  # its verdict is in: nothing it does now matters
        process.kill()
        process.join()
    if not isinstance(answer, dict) or "valid" not in answer:
        detail = answer.get("detail") if isinstance(answer, dict) else None
        return ended_without_verdict(path, process.exitcode or 0, detail)
    return answer


def _check(path: str, environment: dict[str, str], verdicts: Connection) -> None:
    """The child's side: check ``path`` with the daemon's ``environment``, send the verdict.

    Its standard output and error go nowhere, as the output of ``validate``'s child goes
    nowhere a user sees: what a module prints at import must not end up in a one-shot run's
    answer.
    """
    die_with_parent()
    nowhere = os.open(os.devnull, os.O_WRONLY)
    os.dup2(nowhere, 1)
    os.dup2(nowhere, 2)
    os.environ.clear()
    os.environ.update(environment)
    try:
        verdict = verdict_of(Path(path), check_handlers=True)
    except SystemExit as exc:  # a module called sys.exit() while it was imported
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        _say(verdicts, {"detail": None if isinstance(exc.code, int | None) else str(exc.code)})
        os._exit(code)
    except BaseException as exc:  # anything else that stopped the check
        _say(verdicts, {"detail": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    _say(verdicts, verdict)


def _say(verdicts: Connection, answer: dict[str, Any]) -> None:
    verdicts.send_bytes(json.dumps(answer).encode())
