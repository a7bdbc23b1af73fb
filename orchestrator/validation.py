"""Validation in a child process: importing a bundle's modules cannot stop or wedge the caller.

``validate`` imports every Tool and Extension module to check its handlers. A module may do
anything at import: exit (``os._exit(0)``), loop forever, or corrupt the interpreter. So the
check runs in a child that dies with its parent, within a deadline, and only an explicit verdict
it prints counts: an exit without one, or no verdict in time, is a failure of its own.
``run`` and ``node`` get the same verdict (:func:`verdict_of`) before they start anything, from a
child of the agents' fork server (``orchestrator.preflight``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from goondan.errors import ConfigCode, ExitCode

VALIDATE_TIMEOUT_SECONDS = 60.0
"""How long the import checks of one validation may take (``GOONDAN_VALIDATE_TIMEOUT``)."""


def validate_timeout() -> float:
    """:data:`VALIDATE_TIMEOUT_SECONDS`, or ``GOONDAN_VALIDATE_TIMEOUT`` seconds when set."""
    try:
        value = float(os.environ.get("GOONDAN_VALIDATE_TIMEOUT", VALIDATE_TIMEOUT_SECONDS))
    except ValueError:
        return VALIDATE_TIMEOUT_SECONDS
    return value if 0 < value < float("inf") else VALIDATE_TIMEOUT_SECONDS


CHILD_FLAG = "--verdict-from-child"
"""Internal: the child that runs the checks and prints the verdict."""
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child (before ``exec``, or first thing): SIGKILL when its parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the timeout still bounds it
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def verdict_of(path: Path, *, check_handlers: bool) -> dict[str, Any]:
    """What ``validate`` finds in ``path``, here in this process: ``{valid, errors,
    warnings?, summary?}`` with each issue in its JSON form. Run it where an imported module
    can do no harm (:func:`validate_in_child`, ``orchestrator.preflight``)."""
    from bundle import BundleError, load_bundle
    from bundle.lint import bundle_warnings

    try:
        bundle = load_bundle(path, check_handlers=check_handlers, check_providers=True)
    except BundleError as exc:
        return {"valid": False, "errors": [e.to_json() for e in exc.errors]}
    warnings = [w.to_json() for w in bundle_warnings(bundle, handlers=check_handlers)]
    return {"valid": True, "errors": [], "warnings": warnings, "summary": bundle.summary()}


def validate(path: Path, *, check_handlers: bool, timeout: float | None = None) -> dict[str, Any]:
    """The verdict of ``validate`` on ``path``: from a child (:func:`validate_in_child`) when
    the check imports a module the configuration names, else found here, where nothing but
    the runtime's own code is imported (no child's start-up to wait for)."""
    from bundle.user_code import user_code

    if check_handlers:
        try:
            needs_child = bool(user_code(path))
        except Exception:  # whatever reading it found, the child reports it as it would
            needs_child = True
        if needs_child:
            return validate_in_child(path, check_handlers=True, timeout=timeout)
    return verdict_of(path, check_handlers=check_handlers)


def validate_in_child(
    path: Path, *, check_handlers: bool, timeout: float | None = None
) -> dict[str, Any]:
    """The verdict ``{valid, errors: [issue JSON], summary?}`` of a child validating ``path``."""
    timeout = validate_timeout() if timeout is None else timeout
    command = [sys.executable, "-m", "orchestrator", "validate", str(path), "--json", CHILD_FLAG]
    if not check_handlers:
        command.append("--no-handlers")
    try:
        done = run_checking_child(command, timeout)
    except subprocess.TimeoutExpired:  # run() has killed the child
        return timed_out(path, timeout)
    try:
        verdict = json.loads(done.stdout)
    except ValueError:
        verdict = None
    if not isinstance(verdict, dict) or "valid" not in verdict:
        return ended_without_verdict(path, done.returncode, last_line(done.stderr))
    return verdict


def run_checking_child(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``command``, a child that imports modules a user wrote, to its end: its output
    captured, no input, killed when this process dies or after ``timeout`` seconds
    (``subprocess.TimeoutExpired``)."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )


def last_line(output: str) -> str | None:
    """The last line a child printed (often why it ended), ``None`` when it printed nothing."""
    lines = output.strip().splitlines()
    return lines[-1] if lines else None


def timed_out(path: Path, timeout: float) -> dict[str, Any]:
    """The verdict of a check still running after ``timeout`` seconds (and killed)."""
    return failed_verdict(
        path,
        f"the import check did not finish within {timeout:g} s "
        "(a Tool or Extension module may loop while it is imported)",
    )


def ended_without_verdict(path: Path, exit_code: int, detail: str | None) -> dict[str, Any]:
    """The verdict of a check that ended (``exit_code``, negative for a signal) without
    giving one; ``detail`` is the last thing it said."""
    how = f"exit code {exit_code}" if exit_code >= 0 else "a signal"
    return failed_verdict(
        path,
        f"the import check ended ({how}) without a verdict "
        "(a Tool or Extension module may exit while it is imported)"
        + (f": {detail}" if detail else ""),
    )


def failed_verdict(path: Path, message: str) -> dict[str, Any]:
    """The verdict of a check that ended without one of its own: one error saying why."""
    return {
        "valid": False,
        "errors": [
            {
                "code": ConfigCode.E_CONFIG_ENTRY_LOAD_FAILED,
                "message": message,
                "file": str(path),
                "line": None,
                "resource": None,
                "field": None,
                "suggestion": "import each module by hand to see what it does at import time",
            }
        ],
    }


def config_exit(errors: Sequence[Any]) -> int:
    """CONFIG when the configuration could not be read at all, else VALIDATION."""
    unread = {
        ConfigCode.E_CONFIG_FILE_NOT_FOUND,
        ConfigCode.E_CONFIG_FILE_TOO_LARGE,
        ConfigCode.E_CONFIG_PARSE_ERROR,
    }
    codes = {
        getattr(e, "code", None) or (e.get("code") if isinstance(e, dict) else None) for e in errors
    }
    return ExitCode.CONFIG if codes and codes <= unread else ExitCode.VALIDATION


def config_issue(data: dict[str, Any]) -> Any:
    """The ``ConfigIssue`` of one error or warning of a verdict (as the child printed it in
    JSON), for printing as ``validate`` prints it."""
    from bundle import ConfigIssue

    return ConfigIssue(
        code=str(data.get("code")),
        message=str(data.get("message")),
        file=Path(data["file"]) if data.get("file") else None,
        line=data.get("line"),
        column=data.get("column"),
        resource=data.get("resource"),
        field=data.get("field"),
        suggestion=data.get("suggestion"),
    )
