"""The build backend of goondan-py: setuptools builds its wheels and sdists, and an editable
install (``pip install -e .``, the README's first line) needs nothing installed to build.

pip builds a project in an environment of its own, where it first installs what the backend
asks for. Setuptools there cost the README's first line about a tenth of its time (downloading
it, unpacking and byte-compiling a thousand files, then three hooks that import it) for an
editable wheel of a few files: its metadata, read from ``pyproject.toml``, and a path hook that
maps our packages to the checkout. This module writes that wheel itself with the standard
library, and asks for setuptools only to build a real wheel or an sdist (for which it hands
every hook to ``setuptools.build_meta``).

The editable wheel holds ``goondan_py-<version>.dist-info`` (``METADATA``, ``WHEEL``,
``entry_points.txt``, ``RECORD``), a ``.pth`` file that installs the finder at start-up, and
the finder module, which maps each top-level package of ``[tool.setuptools] packages`` to its
folder in the checkout: only those become importable, not the checkout's other folders.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import re
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path.cwd()  # PEP 517: every hook runs in the root of the source tree
SETUPTOOLS = "setuptools>=77"
"""What a real wheel or an sdist is built with (``[build-system]`` asks for nothing)."""
ConfigSettings = Mapping[str, Any] | None


# A real wheel and an sdist: setuptools, installed by pip or `build` from these answers.


def _setuptools() -> ModuleType:
    return importlib.import_module("setuptools.build_meta")


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    """A wheel is built by setuptools."""
    return [SETUPTOOLS]


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    """An sdist is built by setuptools."""
    return [SETUPTOOLS]


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    """Setuptools' metadata of a wheel."""
    return str(_setuptools().prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """Setuptools' wheel."""
    return str(_setuptools().build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    """Setuptools' sdist."""
    return str(_setuptools().build_sdist(sdist_directory, config_settings))


# An editable install: nothing to install, a wheel of a few files.


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    """Nothing: the editable wheel is written with the standard library."""
    return []


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: ConfigSettings = None
) -> str:
    """The editable wheel's ``.dist-info`` folder (its name), written in ``metadata_directory``."""
    project = Project.read(ROOT)
    folder = Path(metadata_directory) / project.dist_info
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in project.metadata_files().items():
        (folder / name).write_bytes(data)
    return project.dist_info


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """The editable wheel (its file name), written in ``wheel_directory``."""
    project = Project.read(ROOT)
    name = f"{project.wheel_name}-{project.version}-0.editable-py3-none-any.whl"
    files = project.editable_files()
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in files.items())
    files[f"{project.dist_info}/RECORD"] = (record + f"{project.dist_info}/RECORD,,\n").encode()
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            wheel.writestr(zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return name


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class Project:
    """``pyproject.toml``'s ``[project]`` as the files of an editable wheel."""

    def __init__(self, root: Path, table: dict[str, Any]) -> None:
        self.root = root
        self.table = table
        project = table["project"]
        self.project: dict[str, Any] = project
        self.name: str = project["name"]
        self.version: str = project["version"]
        self.wheel_name = re.sub(r"[-_.]+", "_", self.name).lower()
        self.dist_info = f"{self.wheel_name}-{self.version}.dist-info"

    @classmethod
    def read(cls, root: Path) -> Project:
        """The project whose ``pyproject.toml`` is in ``root``."""
        return cls(root, tomllib.loads((root / "pyproject.toml").read_text()))

    def packages(self) -> dict[str, str]:
        """Each top-level package of ``[tool.setuptools] packages`` and its folder."""
        found = self.table["tool"]["setuptools"]["packages"]["find"]["include"]
        tops = sorted({pattern.split(".")[0].rstrip("*") for pattern in found})
        return {
            top: str(self.root / top) for top in tops if (self.root / top / "__init__.py").is_file()
        }

    def metadata(self) -> str:
        """Core metadata 2.4, as setuptools writes it for these fields."""
        project = self.project
        lines = [
            "Metadata-Version: 2.4",
            f"Name: {self.name}",
            f"Version: {self.version}",
            f"Summary: {project['description']}",
            f"License-Expression: {project['license']}",
            f"Requires-Python: {project['requires-python']}",
            "Description-Content-Type: text/markdown",
        ]
        lines += [f"Requires-Dist: {_requirement(spec)}" for spec in project["dependencies"]]
        for extra, specs in project.get("optional-dependencies", {}).items():
            lines.append(f"Provides-Extra: {extra}")
            lines += [f"Requires-Dist: {_requirement(spec, extra)}" for spec in specs]
        readme: str = (self.root / project["readme"]).read_text()
        return "\n".join(lines) + "\n\n" + readme

    def entry_points(self) -> str:
        """``entry_points.txt``: the console scripts and every group of ``entry-points``."""
        groups = {"console_scripts": self.project.get("scripts", {})}
        groups.update(self.project.get("entry-points", {}))
        out = io.StringIO()
        for group, points in groups.items():
            if points:
                out.write(f"[{group}]\n")
                out.writelines(f"{name} = {target}\n" for name, target in points.items())
                out.write("\n")
        return out.getvalue()

    def metadata_files(self) -> dict[str, bytes]:
        """The files of the ``.dist-info`` folder but ``RECORD``, by name."""
        wheel = "Wheel-Version: 1.0\nGenerator: goondan_build\nRoot-Is-Purelib: true\n"
        return {
            "METADATA": self.metadata().encode(),
            "WHEEL": (wheel + "Tag: py3-none-any\n").encode(),
            "entry_points.txt": self.entry_points().encode(),
        }

    def editable_files(self) -> dict[str, bytes]:
        """Every file of the editable wheel but ``RECORD``, by path in the wheel."""
        finder = f"__editable___{self.wheel_name}_finder"
        files = {f"{self.dist_info}/{n}": d for n, d in self.metadata_files().items()}
        files[f"{finder}.py"] = FINDER.format(mapping=self.packages()).encode()
        files[f"__editable__.{self.wheel_name}.pth"] = f"import {finder}\n".encode()
        return files


def _requirement(spec: str, extra: str | None = None) -> str:
    """``spec`` as a ``Requires-Dist`` value, its marker joined with ``extra`` when given."""
    requirement, _, marker = spec.partition(";")
    requirement, marker = requirement.strip(), marker.strip().replace("'", '"')
    if extra is not None:
        when = f'extra == "{extra}"'
        marker = f"({marker}) and {when}" if marker else when
    return f"{requirement}; {marker}" if marker else requirement


FINDER = '''\
"""Maps goondan-py's packages to the checkout it was installed from (an editable install)."""

import sys
from importlib.machinery import PathFinder
from importlib.util import spec_from_file_location

MAPPING = {mapping!r}


class EditableFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        folder = MAPPING.get(fullname)
        if folder is None:
            return None
        return spec_from_file_location(
            fullname, folder + "/__init__.py", submodule_search_locations=[folder]
        )

    @classmethod
    def invalidate_caches(cls):
        PathFinder.invalidate_caches()


if EditableFinder not in sys.meta_path:
    sys.meta_path.append(EditableFinder)
'''
