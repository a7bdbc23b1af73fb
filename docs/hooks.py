"""MkDocs hooks of the site: the reference pages are written from the code on every build
(:mod:`orchestrator.reference`), never kept as files that could fall behind it."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    """Add each generated reference page to the site."""
    from orchestrator.reference import PAGES

    for path, write in PAGES.items():
        files.append(File.generated(config, path, content=write()))
    return files
