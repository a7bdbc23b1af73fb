"""What ``goondan test`` prints: a summary table, one JSON object, or JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from itertools import groupby

from orchestrator.testing_suite.runner import CaseResult

MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR"}


def counts(results: Sequence[CaseResult]) -> dict[str, int]:
    """``{total, passed, failed, errors}``."""
    by_status = Counter(r.status for r in results)
    return {
        "total": len(results),
        "passed": by_status["passed"],
        "failed": by_status["failed"],
        "errors": by_status["error"],
    }


def summary_line(results: Sequence[CaseResult], seconds: float) -> str:
    """``3 passed, 1 failed, 0 errors in 4.2 s``."""
    n = counts(results)
    return (
        f"{n['passed']} passed, {n['failed']} failed, {n['errors']} errors "
        f"of {n['total']} case(s) in {seconds:.1f} s"
    )


def table(results: Sequence[CaseResult], seconds: float) -> str:
    """A row per case (result, time, id), each failure's reasons under it, and the summary."""
    width = max((len(r.case.id) for r in results), default=4)
    lines = [f"{'RESULT':<6}  {'TIME':>6}  CASE", f"{'-' * 6}  {'-' * 6}  {'-' * width}"]
    for result in results:
        lines.append(f"{MARKS[result.status]:<6}  {result.seconds:>5.1f}s  {result.case.id}")
    for result in results:
        if result.failures:
            lines += ["", f"{MARKS[result.status]} {result.case.id}"]
            for failure in result.failures:
                lines += ["  " + line for line in failure.splitlines()]
    lines += ["", summary_line(results, seconds)]
    return "\n".join(lines)


def json_report(results: Sequence[CaseResult], seconds: float) -> dict[str, object]:
    """The ``--json`` object: counts, time, and every case's result."""
    return {
        **counts(results),
        "ok": all(r.passed for r in results),
        "seconds": round(seconds, 3),
        "cases": [r.to_json() for r in results],
    }


def junit_xml(results: Sequence[CaseResult]) -> str:
    """JUnit XML: a ``testsuite`` per TestSuite, a ``testcase`` per case; a failed case has a
    ``failure``, one that could not run an ``error``, each with every reason in its text."""
    root = ET.Element("testsuites", {"name": "goondan", **_attributes(results)})
    for suite, group in groupby(results, key=lambda r: r.case.suite):
        members = list(group)
        element = ET.SubElement(root, "testsuite", {"name": suite, **_attributes(members)})
        for result in members:
            case = ET.SubElement(
                element,
                "testcase",
                classname=suite,
                name=result.case.case.name,
                time=f"{result.seconds:.3f}",
            )
            if result.status != "passed":
                tag = "failure" if result.status == "failed" else "error"
                reasons = result.failures or ["failed"]
                problem = ET.SubElement(case, tag, message=reasons[0].splitlines()[0])
                problem.text = "\n\n".join(reasons)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _attributes(results: Sequence[CaseResult]) -> dict[str, str]:
    n = counts(results)
    return {
        "tests": str(n["total"]),
        "failures": str(n["failed"]),
        "errors": str(n["errors"]),
        "time": f"{sum(r.seconds for r in results):.3f}",
    }
