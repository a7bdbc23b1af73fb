"""Publishing a Goondan package: a wheel and an sdist built by ``build``, checked to be a Goondan
package, uploaded by ``twine`` to a PyPI-compatible index.

Both tools come with the ``packages`` extra (``pip install 'goondan-py[packages]'``). The
credentials are twine's (``TWINE_USERNAME``/``TWINE_PASSWORD``, or a token in
``GOONDAN_PUBLISH_TOKEN``, sent as user ``__token__``); they never reach the output.
"""

from __future__ import annotations

import configparser
import importlib.util
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import yaml

from bundle.packages import ENTRY_POINT_GROUP, MANIFEST

EXTRA = "packages"
TOKEN_ENV = "GOONDAN_PUBLISH_TOKEN"
TOOL_TIMEOUT_SECONDS = 900.0
"""A bound on one build or upload."""


class PublishError(Exception):
    """Publishing failed; ``kind`` says how: ``extra`` (a tool missing), ``build``,
    ``package`` (not a Goondan package), ``auth`` (credentials refused), ``network``, ``upload``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def require_extra(*modules: str) -> None:
    """:class:`PublishError` naming the extra unless every module of ``modules`` imports."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise PublishError(
            "extra",
            f"{' and '.join(missing)} not installed: package publish needs the `{EXTRA}` extra "
            f"(pip install 'goondan-py[{EXTRA}]')",
        )


def _run(command: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=TOOL_TIMEOUT_SECONDS,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 1, f"{command[2]} did not finish within {TOOL_TIMEOUT_SECONDS:.0f} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def build(project: Path, outdir: Path, *, isolation: bool = True) -> list[Path]:
    """The wheel and sdist of the Python project ``project``, built into ``outdir``."""
    if not (project / "pyproject.toml").is_file():
        raise PublishError("package", f"{project} has no pyproject.toml: not a Python project")
    require_extra("build")
    command = [sys.executable, "-m", "build", "--outdir", str(outdir), str(project)]
    if not isolation:
        command.insert(-1, "--no-isolation")
    code, output = _run(command)
    if code != 0:
        raise PublishError("build", "build failed:\n" + "\n".join(output.splitlines()[-20:]))
    files = sorted(p for p in outdir.iterdir() if p.suffix == ".whl" or p.name.endswith(".gz"))
    if not any(p.suffix == ".whl" for p in files):
        raise PublishError("build", f"build wrote no wheel into {outdir}")
    return files


def goondan_packages(wheel: Path) -> list[str]:
    """The Goondan packages ``wheel`` provides: each ``goondan.packages`` entry point whose
    module directory holds a goondan.yaml whose Package document has the entry point's name.
    :class:`PublishError` (``package``) when it provides none, or one is broken."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep case
        if entry_points is not None:
            parser.read_string(archive.read(entry_points).decode())
        if not parser.has_section(ENTRY_POINT_GROUP):
            raise PublishError(
                "package",
                f"{wheel.name} has no {ENTRY_POINT_GROUP} entry point: not a Goondan package "
                f'(add [project.entry-points."{ENTRY_POINT_GROUP}"] "@scope/name" = "module" '
                "to pyproject.toml)",
            )
        packages = []
        for package, module in parser.items(ENTRY_POINT_GROUP):
            manifest = str(PurePosixPath(*module.strip().split(".")) / MANIFEST)
            if manifest not in names:
                raise PublishError(
                    "package", f"{wheel.name}: {package} = {module}, but {manifest} is not in it"
                )
            first = next(iter(yaml.safe_load_all(archive.read(manifest))), None)
            declared = (first or {}).get("metadata", {}).get("name")
            if not isinstance(first, dict) or first.get("kind") != "Package" or declared != package:
                raise PublishError(
                    "package",
                    f"{wheel.name}: {manifest} must begin with a Package document named "
                    f"{package!r} (found {declared!r})",
                )
            packages.append(package)
        return packages


def upload(files: Sequence[Path], registry: str | None, env: Mapping[str, str]) -> None:
    """Upload ``files`` with twine to ``registry`` (``None``: twine's default or
    ``TWINE_REPOSITORY_URL``)."""
    require_extra("twine")
    env = dict(env)
    secrets = [env[k] for k in ("TWINE_PASSWORD", TOKEN_ENV) if env.get(k)]
    if env.get(TOKEN_ENV) and not env.get("TWINE_PASSWORD"):
        env["TWINE_USERNAME"] = "__token__"
        env["TWINE_PASSWORD"] = env[TOKEN_ENV]
    command = [sys.executable, "-m", "twine", "upload", "--non-interactive"]
    command += ["--disable-progress-bar"]
    if registry is not None:
        command += ["--repository-url", registry]
    code, output = _run([*command, *map(str, files)], env)
    for secret in secrets:  # twine does not print them; this makes sure
        output = output.replace(secret, "***")
    if code == 0:
        return
    tail = "\n".join(output.splitlines()[-10:])
    if any(status in output for status in ("401 ", "403 ", "Credential not found")):
        raise PublishError("auth", f"the index refused the credentials:\n{tail}")
    if "Connection" in output or "Max retries" in output:
        raise PublishError("network", f"the index cannot be reached:\n{tail}")
    raise PublishError("upload", f"twine upload failed:\n{tail}")
