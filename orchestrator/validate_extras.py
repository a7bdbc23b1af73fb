"""What ``validate`` does before it checks: ``--verbose`` names the files it reads.

It prints in the command's format and hands back the fields it adds to the JSON verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def list_files(path: Path, form: str, verbose: bool) -> dict[str, Any]:
    """The files validation reads for ``path``: printed with ``verbose`` (text), and the
    ``files`` field of the JSON verdict."""
    from bundle.scan import source_files

    files = source_files(path)
    if verbose and form == "text":
        for file in files:
            print(f"read {_relative(file)}")
    return {"files": [str(f) for f in files]}
