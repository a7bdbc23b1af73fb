"""The build backend's editable wheel (``_build/goondan_build.py``): the metadata pip resolves
from says what ``pyproject.toml`` says, and the wheel maps our packages, and only them, to the
checkout. Wheels and sdists are setuptools' own (the backend asks pip for it)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"goondan", "bundle", "ipc", "tools_base", "agent_process", "connector_process"}


def backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("goondan_build", ROOT / "_build/goondan_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.chdir(ROOT)  # PEP 517: the hooks run in the source tree's root
    return backend()


def active(requirements: list[Requirement], extra: str) -> set[str]:
    """``requirements`` that apply with ``extra`` asked for (``""``: none), on this machine."""
    return {
        f"{r.name}{sorted(r.extras)}{r.specifier}"
        for r in requirements
        if r.marker is None or r.marker.evaluate({"extra": extra})
    }


def test_the_editable_metadata_says_what_pyproject_says(hooks: ModuleType, tmp_path: Path) -> None:
    assert hooks.get_requires_for_build_editable() == []
    assert hooks.get_requires_for_build_wheel() == ["setuptools>=77"]
    folder = hooks.prepare_metadata_for_build_editable(str(tmp_path))
    metadata = Parser().parsestr((tmp_path / folder / "METADATA").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert folder == f"goondan_py-{project['version']}.dist-info"
    assert (metadata["Name"], metadata["Version"]) == (project["name"], project["version"])
    assert metadata["Requires-Python"] == project["requires-python"]
    assert metadata["License-Expression"] == project["license"]
    assert metadata.get_payload() == (ROOT / "README.md").read_text()
    declared = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    core = [Requirement(spec) for spec in project["dependencies"]]
    assert active(declared, "") == active(core, "")
    extras = project["optional-dependencies"]
    assert set(metadata.get_all("Provides-Extra")) == set(extras)
    for extra, specs in extras.items():
        wanted = core + [Requirement(spec) for spec in specs]
        assert active(declared, extra) == active(wanted, ""), extra
    points = (tmp_path / folder / "entry_points.txt").read_text()
    assert "[console_scripts]\ngoondan = orchestrator.__main__:main\n" in points
    assert "[goondan.packages]\n@goondan/base = tools_base\n" in points
    assert "[pytest11]\n" in points


def test_the_editable_wheel_maps_our_packages_and_nothing_else(
    hooks: ModuleType, tmp_path: Path
) -> None:
    name = hooks.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as wheel:
        files = {path: wheel.read(path) for path in wheel.namelist()}
    dist_info = name.split("-0.editable")[0] + ".dist-info"
    record = files.pop(f"{dist_info}/RECORD").decode().splitlines()
    assert f"{dist_info}/RECORD,," in record
    for line in record[:-1]:
        path, digest, size = line.split(",")
        data = files[path]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        assert digest == f"sha256={expected.decode()}"
        assert int(size) == len(data)
    assert len(record) - 1 == len(files)
    site = tmp_path / "site"
    site.mkdir()
    for path, data in files.items():
        if "/" not in path:
            (site / path).write_bytes(data)
    [pth] = [p for p in files if p.endswith(".pth")]
    finder = files[pth].decode().split()[1]
    probe = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import {finder}; "
        "import importlib.util as u; "
        "print([u.find_spec(n).origin for n in sys.argv[1:-2]]); "
        "print([u.find_spec(n) for n in sys.argv[-2:]])"
    )
    # -S: without the development environment's own editable install of the same packages.
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            probe,
            *sorted(PACKAGES),
            "orchestrator",
            "tests",
            "benchmarks",
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},  # no PYTHONPATH: the checkout only through the wheel
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    origins, hidden = done.stdout.splitlines()
    assert origins == repr(
        [str(ROOT / n / "__init__.py") for n in [*sorted(PACKAGES), "orchestrator"]]
    )
    assert hidden == "[None, None]"
