"""What ``validate`` does before it checks: ``--fix`` repairs files, ``--verbose`` names them.

Both print in the command's format (text, json or github) and hand back the fields they add to
the JSON verdict; the checks themselves run as before, on the repaired files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _notice(file: Path, line: int | None, message: str) -> str:
    """A GitHub Actions ``::notice`` workflow command."""

    def escape(text: str, in_property: bool = False) -> str:
        text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        return text.replace(":", "%3A").replace(",", "%2C") if in_property else text

    where = f"file={escape(_relative(file), True)}" + (f",line={line}" if line else "")
    return f"::notice {where},title=FIXED::{escape(message)}"


def apply_fixes(path: Path, form: str) -> dict[str, Any]:
    """``validate --fix``: repair the bundle at ``path`` in place and print each change (to
    stdout) and each file left untouched (to stderr); the ``fixes``/``notFixed`` fields of
    the JSON verdict."""
    from bundle.fix import fix_bundle

    report = fix_bundle(path)
    if form == "text":
        for change in report.changes:
            print(f"fixed {change.format()}")
        for refusal in report.refused:
            print(refusal.format(), file=sys.stderr)
    elif form == "github":
        for change in report.changes:
            print(_notice(change.file, change.line, f"fixed: {change.what}"))
        for refusal in report.refused:
            print(_notice(refusal.file, None, f"not fixed: {refusal.reason}"))
    return {
        "fixes": [c.to_json() for c in report.changes],
        "notFixed": [r.to_json() for r in report.refused],
    }


def list_files(path: Path, form: str, verbose: bool) -> dict[str, Any]:
    """The files validation reads for ``path``: printed with ``verbose`` (text), and the
    ``files`` field of the JSON verdict."""
    from bundle.scan import source_files

    files = source_files(path)
    if verbose and form == "text":
        for file in files:
            print(f"read {_relative(file)}")
    return {"files": [str(f) for f in files]}
