"""``test``: run the bundle's TestSuites on real daemons, model calls from cassettes."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from goondan.errors import ExitCode
from orchestrator.cli.common import bundle_path, fail, serve

if TYPE_CHECKING:
    from orchestrator.testing_suite.runner import CaseResult


def add_test_options(sub: argparse.ArgumentParser) -> None:
    """The options of ``test``."""
    sub.add_argument(
        "--record",
        action="store_true",
        help="send model calls to the real provider and write every case's cassette",
    )
    sub.add_argument(
        "--update",
        action="store_true",
        help="replay every case, then record again only the cases that failed",
    )
    sub.add_argument(
        "--cassettes",
        metavar="DIR",
        help="where the cassettes are (default: tests/cassettes beside the bundle)",
    )
    sub.add_argument("-k", metavar="PATTERN", dest="pattern", help="run the cases matching it")
    sub.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML")
    sub.add_argument("--json", action="store_true", help="print one JSON object")
    sub.add_argument(
        "--parallel", type=int, default=None, metavar="N", help="cases run at once (default: 4)"
    )


def cmd_test(args: argparse.Namespace) -> int:
    """Run the selected cases; exit 0 when all pass, 1 when any fails, 4 (3 when unreadable)
    for a bundle or suite that does not validate."""
    if args.record and args.update:
        return fail(args, ExitCode.USAGE, "--record and --update exclude each other")
    if not args.verbose:
        os.environ.setdefault("GOONDAN_LOG_LEVEL", "error")  # the agents inherit it
    return serve(args, "test", _main, one_shot=True)


async def _main(args: argparse.Namespace) -> int:
    from bundle import BundleError
    from orchestrator.testing_suite.cases import DEFAULT_CASSETTES, load_cases, selected
    from orchestrator.testing_suite.runner import DEFAULT_PARALLEL, RunSettings, run_cases
    from orchestrator.validation import config_exit

    path = bundle_path(args)
    try:
        _, cases = load_cases(path)
    except BundleError as exc:
        code = config_exit(exc.errors)
        if args.json:
            issues = [issue.to_json() for issue in exc.errors]
            print(json.dumps({"ok": False, "exitCode": code, "errors": issues}))
        else:
            for issue in exc.errors:
                print(issue.format(), file=sys.stderr)
        return code
    chosen = selected(cases, args.pattern)
    if not chosen:
        what = f"matching {args.pattern!r}" if args.pattern else "(no TestSuite in the bundle)"
        return fail(args, ExitCode.INTERNAL, f"no test case {what}")
    root = path if path.is_dir() else path.parent
    settings = RunSettings(
        bundle_path=path,
        cassettes=Path(args.cassettes) if args.cassettes else root / DEFAULT_CASSETTES,
        record=args.record,
        parallel=args.parallel or DEFAULT_PARALLEL,
    )
    started = time.perf_counter()
    results = await run_cases(chosen, settings)
    if args.update:
        again = [r.case for r in results if not r.passed]
        if again:
            recording = dataclasses.replace(settings, record=True)
            recorded = {r.case.id: r for r in await run_cases(again, recording)}
            results = [recorded.get(r.case.id, r) for r in results]
    return _report(args, results, time.perf_counter() - started)


def _report(args: argparse.Namespace, results: list[CaseResult], seconds: float) -> int:
    """Print (and write, with ``--junit``) the results; the exit status they make."""
    from orchestrator.testing_suite import report

    if args.junit:
        Path(args.junit).write_text(report.junit_xml(results), encoding="utf-8")
    if args.json:
        print(json.dumps(report.json_report(results, seconds)))
    else:
        print(report.table(results, seconds))
    return ExitCode.OK if all(r.passed for r in results) else ExitCode.INTERNAL
