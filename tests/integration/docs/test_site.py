"""The documentation site builds as it is published (``mkdocs build --strict``: every page in
the navigation, every link and anchor resolving, every included snippet found), and README.md
stays a short page whose links all lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README_MAX_LINES = 150
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "guides" / "http-api" / "index.html").exists()
    changelog = (tmp_path / "changelog" / "index.html").read_text()
    assert "Unreleased" in changelog  # the changelog is included, not copied
    # The site's build machinery (its hook, the screenshot script, their bytecode) is not published.
    assert [p.name for p in tmp_path.rglob("*.py*")] == []


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md", "tests/README.md"])
def test_every_relative_link_of_a_top_level_page_resolves(page: str) -> None:
    path = ROOT / page
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor of the page itself
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            broken.append(target)
    assert broken == []


def test_every_name_tool_authors_import_has_an_entry() -> None:
    import tools_base

    page = (ROOT / "docs" / "reference" / "python-api.md").read_text()
    documented = set(re.findall(r"^::: tools_base\.(\w+)$", page, flags=re.MULTILINE))
    assert set(tools_base.__all__) - documented == set()
    assert documented - set(tools_base.__all__) == set()
