"""``validate`` and ``schema``: a configuration checked, and the JSON Schema it is checked
against."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from goondan.errors import ExitCode
from orchestrator.cli.common import bundle_path
from orchestrator.validation import config_exit, config_issue


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a configuration: exit 0 with a summary, or list every error and exit 4 (3
    when it cannot be read at all). Warnings are shown too, and count as errors with
    ``--strict``. ``--format github`` prints workflow annotations.

    The checks that import Tool, Extension and Connector modules the configuration names run
    in a child process with a deadline (:mod:`orchestrator.validation`), so no module can end
    or wedge this command; a configuration naming none is checked here.
    """
    from orchestrator.cli.validate_extras import apply_fixes, list_files
    from orchestrator.validation import validate

    path = bundle_path(args)
    if args.verdict_from_child:
        return _validate_here(path, check_handlers=not args.no_handlers)
    form = "json" if args.json else args.format
    added = apply_fixes(path, form) if args.fix else {}
    added.update(list_files(path, form, verbose=args.verbose > 0))
    verdict = {**validate(path, check_handlers=not args.no_handlers), **added}
    read = msgspec.convert(verdict, _Verdict)
    errors, warnings = list(read.errors or []), list(read.warnings or [])
    if args.strict:
        errors, warnings = errors + warnings, []
    code = int(ExitCode.OK) if not errors else config_exit(errors)
    _PRINTERS.get(form, _print_text)(path, verdict, errors, warnings, code)
    return code


Issues = list[Any]
"""Issues as the verdict holds them (read back from the checking child's JSON)."""


class _Verdict(msgspec.Struct):
    """The lists of the checking child's verdict (``verdict_of``), as ``validate`` reads them."""

    errors: Issues | None = None
    """The errors, each in its JSON form (``ConfigIssue.to_json``)."""
    warnings: Issues | None = None
    """The warnings, in the same form."""
    summary: object = None
    """What the configuration holds, for a valid one (``Bundle.summary``)."""


def _print_json(
    path: Path, verdict: Mapping[str, Any], errors: Issues, warnings: Issues, code: int
) -> None:
    body = {
        **verdict,
        "valid": not errors,
        "errors": errors,
        "warnings": warnings,
        "exitCode": code,
    }
    print(json.dumps(body, indent=2))


def _print_github(
    path: Path, verdict: Mapping[str, Any], errors: Issues, warnings: Issues, code: int
) -> None:
    for level, issues in (("error", errors), ("warning", warnings)):
        for issue in issues:
            print(_github_annotation(level, issue))


def _print_text(
    path: Path, verdict: Mapping[str, Any], errors: Issues, warnings: Issues, code: int
) -> None:
    for issue in warnings:
        print("warning: " + config_issue(issue).format(), file=sys.stderr)
    if not errors:
        print(f"{path}: valid ({msgspec.convert(verdict, _Verdict).summary})")
        return
    for issue in errors:
        print(config_issue(issue).format(), file=sys.stderr)
    print(f"{len(errors)} error{'s' if len(errors) != 1 else ''} in {path}", file=sys.stderr)


_PRINTERS = {"json": _print_json, "github": _print_github}
"""How each ``--format`` shows the verdict; any other is the text form."""


def _github_annotation(level: str, issue: dict[str, Any]) -> str:
    """``::error file=F,line=N,title=CODE::message`` (a GitHub Actions workflow command)."""

    def escape(text: str, in_property: bool = False) -> str:
        text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        return text.replace(":", "%3A").replace(",", "%2C") if in_property else text

    read = config_issue(issue)
    properties = []
    if read.file:
        try:
            shown = str(read.file.resolve().relative_to(Path.cwd()))
        except ValueError:
            shown = str(read.file)
        properties.append(f"file={escape(shown, True)}")
    if read.line:
        properties.append(f"line={read.line}")
    properties.append(f"title={escape(read.code, True)}")
    where = " ".join(str(v) for v in (read.resource, read.field) if v)
    message = f"{where}: {read.message}" if where else read.message
    if read.suggestion:
        message += f" (hint: {read.suggestion})"
    return f"::{level} {','.join(properties)}::{escape(message)}"


def _validate_here(path: Path, *, check_handlers: bool) -> int:
    """The child's side of ``validate``: load, check, print the verdict as JSON (alone on
    stdout: what a module prints while it is imported goes to stderr)."""
    from orchestrator.validation import verdict_of

    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        verdict = verdict_of(path, check_handlers=check_handlers)
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    print(json.dumps(verdict))
    return 0 if verdict["valid"] else 1


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of goondan.yaml documents."""
    from bundle import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0
