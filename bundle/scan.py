"""Which files of a bundle directory are read: the walk upstream's loader does.

Every ``.yaml``/``.yml`` file whose base name (any case) is one of :data:`BUNDLE_FILE_STEMS`,
in the directory or any directory under it, except directories of build output, dependencies,
version control, virtualenvs and the runtime's own state (whose installed packages hold
``goondan.yaml`` files of their own).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

BUNDLE_FILE_STEMS = (
    "goondan",
    "model",
    "models",
    "tool",
    "tools",
    "agent",
    "agents",
    "extension",
    "extensions",
    "connector",
    "connectors",
    "connection",
    "connections",
    "swarm",
    "swarms",
    "resources",
    "testsuite",
    "testsuites",
)
"""The base names of a bundle's files, singular and plural; within a directory they are read
in this order."""
SUFFIXES = (".yaml", ".yml")
SKIPPED_DIRECTORIES = frozenset(
    {"dist", "node_modules", ".git", ".goondan", ".venv", "venv", "__pycache__"}
)
"""Directory names (any case) never walked into; a directory holding ``pyvenv.cfg`` (any
virtualenv) is skipped too."""
_RANK = {stem: rank for rank, stem in enumerate(BUNDLE_FILE_STEMS)}


def is_bundle_file(name: str) -> bool:
    """Whether a file called ``name`` is part of a bundle directory."""
    stem, suffix = os.path.splitext(name.lower())
    return suffix in SUFFIXES and stem in _RANK


def _skipped(directory: Path, name: str) -> bool:
    return name.lower() in SKIPPED_DIRECTORIES or (directory / name / "pyvenv.cfg").is_file()


def _walk(directory: Path) -> Iterator[tuple[Path, list[str]]]:
    # Symlinked directories are not followed, so a link cannot loop the walk or pull in a
    # tree from elsewhere; an unreadable directory is passed over, as os.walk does.
    for current, subdirectories, files in os.walk(directory):
        here = Path(current)
        subdirectories[:] = sorted(d for d in subdirectories if not _skipped(here, d))
        yield here, files


def bundle_directories(directory: Path) -> list[Path]:
    """``directory`` and every directory under it that is walked, parents first."""
    return [here for here, _ in _walk(directory)]


def _order(directory: Path, file: Path) -> tuple[tuple[str, ...], int, str]:
    # The top directory first (its goondan.yaml leads), then subdirectories by path; within
    # a directory by BUNDLE_FILE_STEMS, `.yaml` before `.yml`.
    return (
        file.parent.relative_to(directory).parts,
        _RANK[os.path.splitext(file.name.lower())[0]],
        file.name,
    )


def bundle_files(directory: Path) -> list[Path]:
    """The files of the bundle in ``directory`` that exist, in the order they are read."""
    files = [
        here / name
        for here, names in _walk(directory)
        for name in names
        if is_bundle_file(name) and (here / name).is_file()
    ]
    return sorted(files, key=lambda file: _order(directory, file))


def bundle_candidates(directory: Path) -> list[Path]:
    """Every file name a bundle directory may hold in the directories it has, present or not
    (what to watch for a file being added)."""
    return [
        here / f"{stem}{suffix}"
        for here in bundle_directories(directory)
        for stem in BUNDLE_FILE_STEMS
        for suffix in SUFFIXES
    ]


def source_files(path: Path) -> list[Path]:
    """The files :func:`bundle.loading.load_bundle` reads for ``path``: the file itself, or
    those of a bundle directory (its ``goondan.yaml``, absent, when it has none)."""
    if path.is_dir():
        return bundle_files(path) or [path / "goondan.yaml"]
    return [path]
