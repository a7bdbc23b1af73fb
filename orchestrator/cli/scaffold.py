"""``init``: a new swarm of one's own, from a template that runs as written.

Templates (in ``orchestrator/templates/``): ``offline`` (a scripted Model, no key),
``openai`` and ``anthropic`` (the same agent on a real LLM, the key from ``.env``) and
``multi-agent`` (two agents handing work over, offline). Each writes ``goondan.yaml``,
``prompts/``, a ``tools/`` package with a tool and its test, ``.env.example`` and
``.gitignore``. Nothing is overwritten without ``force``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates"
TEMPLATES = ("offline", "openai", "anthropic", "multi-agent")
COMMON = "_common"
RENAMED = {"env.example": ".env.example", "gitignore": ".gitignore"}
"""Shipped without their leading dot (package data skips dotfiles), written with it."""
_NAME = re.compile(r"[^a-z0-9._-]+")


class ScaffoldRefused(FileExistsError):
    """The target holds files ``init`` would overwrite (and ``force`` was not given)."""


@dataclass(frozen=True, slots=True)
class Scaffolded:
    """What ``init`` wrote."""

    directory: Path
    template: str
    name: str
    files: list[Path]


def package_name(directory: Path) -> str:
    """A Package name from a directory name: lowercase, ``[a-z0-9._-]``."""
    name = _NAME.sub("-", directory.resolve().name.lower()).strip("-._")
    return name or "my-swarm"


def template_files(template: str) -> dict[Path, Path]:
    """``relative target → source`` of every file ``template`` writes (its own files win over
    the shared ones)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of: {', '.join(TEMPLATES)}")
    files: dict[Path, Path] = {}
    for root in (TEMPLATES_DIR / COMMON, TEMPLATES_DIR / template):
        for source in sorted(root.rglob("*")):
            if source.is_file() and "__pycache__" not in source.parts:
                relative = source.relative_to(root)
                files[relative.with_name(RENAMED.get(relative.name, relative.name))] = source
    return files


def scaffold(
    directory: Path, template: str = "offline", *, name: str | None = None, force: bool = False
) -> Scaffolded:
    """Write ``template`` into ``directory`` (created if needed). Raises
    :class:`ScaffoldRefused` naming the files that exist, unless ``force``."""
    files = template_files(template)
    existing = sorted(str(p) for p in files if (directory / p).exists())
    if existing and not force:
        raise ScaffoldRefused(
            f"{directory} already has {', '.join(existing)}; use --force to overwrite"
        )
    package = name or package_name(directory)
    written = []
    for relative, source in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        text = source.read_text(encoding="utf-8")
        target.write_text(text.replace("{{name}}", package), encoding="utf-8")
        written.append(target)
    return Scaffolded(directory, template, package, written)
