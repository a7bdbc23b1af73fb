"""A real package index on loopback (pypiserver), a Goondan package to put on it, and a fresh
virtualenv for ``goondan package`` to install into.

The test package builds with a PEP 517 backend of its own (stdlib only, ``requires = []``), so
``python -m build`` needs nothing from the network.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "@acme/tools"
DISTRIBUTION = "acme-tools"
MODULE = "acme_tools"
USERNAME = "publisher"

BACKEND = '''
"""A PEP 517 backend of a few lines: the package's module directory, as a wheel and an sdist."""
import base64, hashlib, io, tarfile, tomllib, zipfile
from pathlib import Path

HERE = Path(__file__).parent


def _project():
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    return project["name"], project["version"], project.get("entry-points", {})


def _metadata(name, version):
    return f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, entry_points = _project()
    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        path.relative_to(HERE).as_posix(): path.read_bytes()
        for path in sorted((HERE / stem).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    files[f"{info}/METADATA"] = _metadata(name, version).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\\n" + "".join(f"{key} = {value}\\n" for key, value in points.items())
        for group, points in entry_points.items()
    ).encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\\n".join(record) + "\\n").encode()
    wheel = f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    name, version, _ = _project()
    stem = f"{name.replace('-', '_')}-{version}"
    with tarfile.open(Path(sdist_directory) / f"{stem}.tar.gz", "w:gz") as archive:
        for path in sorted(HERE.rglob("*")):
            if path.is_file() and not {"dist", "__pycache__"} & set(path.parts):
                archive.add(path, f"{stem}/{path.relative_to(HERE).as_posix()}")
        info = tarfile.TarInfo(f"{stem}/PKG-INFO")
        data = _metadata(name, version).encode()
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return f"{stem}.tar.gz"
'''

MANIFEST = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "{package}"
spec:
  version: "{version}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: thing
spec:
  entry: ./thing.py
  exports:
    - name: version
      description: The version of this package.
      parameters: {{type: object, properties: {{}}}}
"""

HANDLER = """\
async def version(ctx, input):
    return {{"version": "{version}"}}


handlers = {{"version": version}}
"""


def write_package(directory: Path, version: str) -> Path:
    """The source of ``acme-tools`` ``version``: a ``goondan.packages`` entry point naming
    ``@acme/tools``, whose manifest declares Tool ``thing`` (export ``version``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [build-system]
            requires = []
            build-backend = "backend"
            backend-path = ["."]

            [project]
            name = "{DISTRIBUTION}"
            version = "{version}"

            [project.entry-points."goondan.packages"]
            "{PACKAGE}" = "{MODULE}"
            """)
    )
    (directory / "backend.py").write_text(BACKEND)
    module = directory / MODULE
    module.mkdir(exist_ok=True)
    (module / "__init__.py").write_text("")
    (module / "goondan.yaml").write_text(MANIFEST.format(package=PACKAGE, version=version))
    (module / "thing.py").write_text(HANDLER.format(version=version))
    return directory


def build_package(source: Path, outdir: Path) -> Path:
    """Its wheel in ``outdir``, built by its backend (as ``python -m build --wheel`` would, less
    the start of a build frontend)."""
    spec = importlib.util.spec_from_file_location(f"backend_{id(source)}", source / "backend.py")
    assert spec is not None
    assert spec.loader is not None
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    outdir.mkdir(parents=True, exist_ok=True)
    return outdir / backend.build_wheel(str(outdir))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Index:
    """A running pypiserver: its simple index (for installs) and its upload URL."""

    url: str
    upload_url: str
    directory: Path
    password: str


@contextmanager
def package_index(directory: Path, password: str) -> Iterator[Index]:
    """pypiserver on 127.0.0.1 serving ``directory`` (no fallback to any other index);
    uploads need ``USERNAME``/``password``."""
    packages = directory / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    # Apache's {SHA} form, which pypiserver checks through passlib (in its own process)
    digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
    (directory / "htpasswd").write_text(f"{USERNAME}:{{SHA}}{digest}\n")
    port = _free_port()
    server = shutil.which("pypi-server", path=str(Path(sys.executable).parent))
    assert server is not None, "pypiserver is in the dev extra"
    process = subprocess.Popen(
        [
            server,
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--disable-fallback",
            "--authenticate",
            "update",
            "--passwords",
            str(directory / "htpasswd"),
            "--log-stream",
            "none",
            str(packages),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, "pypiserver exited"
                assert time.monotonic() < deadline, "pypiserver did not answer within 30 s"
                time.sleep(0.05)
        yield Index(f"{base}/simple/", f"{base}/", packages, password)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def fresh_environment(directory: Path) -> Path:
    """A new virtualenv whose interpreter also sees this one's packages (goondan-py and its
    dependencies, editable installs included) behind its own; its python's path.

    ``--system-site-packages`` would give the base interpreter's packages, not this
    virtualenv's, so a ``.pth`` adds them (``site.addsitedir`` also runs their ``.pth`` files).
    """
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(directory)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    python = directory / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    (Path(own) / "_outer_environment.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    return python


def environment_variables() -> dict[str, str]:
    """The environment of a ``goondan package`` command under test: pip asks nothing, caches
    nothing (two runs must see the index as it is), and no ambient index or credential."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "TWINE_", "GOONDAN_PACKAGE"))
    }
    env.update(PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env["PIP_CONFIG_FILE"] = os.devnull  # this machine's index settings play no part
    return env
