"""``goondan package`` against a real index on loopback (pypiserver), installing into a fresh
virtualenv whose interpreter runs goondan: add, install, the lockfile, a frozen install
refusing a drift, update within the range, publish, and a swarm calling the package's tool."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from tests.support.package_index import (
    DISTRIBUTION,
    PACKAGE,
    USERNAME,
    Index,
    build_package,
    environment_variables,
    fresh_environment,
    package_index,
    write_package,
)

pytestmark = pytest.mark.timeout(240)
PASSWORD = "s3cret-upload-password"

SWARM = """\
# the team's swarm: comments and order must survive `package add`
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: team
spec:
  version: "0.1.0"  # ours
  # dependencies come below
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^version$"}
        call: {tool: thing__version}
      - when: {toolResult: thing__version, status: ok}
        reply: "acme {result.version}"
      - when: {status: error}
        reply: "ERROR {errorCode}: {error}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/brain}
  tools:
    - ref: {kind: Tool, name: thing, package: "@acme/tools"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/helper
  agents: [Agent/helper]
"""


class Goondan:
    """``python -m orchestrator`` of the fresh environment, in the bundle's directory."""

    def __init__(self, python: Path, bundle: Path) -> None:
        self.python = python
        self.bundle = bundle

    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "-m", "orchestrator", *args],
            cwd=self.bundle,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            env={**environment_variables(), **(env or {})},
            check=False,
        )

    def installed(self) -> str | None:
        """The version of the test package in the environment (``None``: not there)."""
        program = (
            "import importlib.metadata as m\n"
            f"try: print(m.version({DISTRIBUTION!r}))\n"
            "except m.PackageNotFoundError: pass"
        )
        done = subprocess.run(
            [str(self.python), "-c", program],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip() or None

    def answer(self) -> str:
        done = self("run", "--input", "version", "--json")
        assert done.returncode == 0, done.stderr
        output: str = json.loads(done.stdout)["output"]
        return output


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    """The index, serving acme-tools 1.0.0 (1.1.0 is built beside it, in ``later/``)."""
    with package_index(tmp_path / "index", PASSWORD) as running:
        build_package(write_package(tmp_path / "src-1.0.0", "1.0.0"), running.directory)
        build_package(write_package(tmp_path / "src-1.1.0", "1.1.0"), tmp_path / "later")
        yield running


@pytest.fixture
def goondan(tmp_path: Path) -> Goondan:
    bundle = tmp_path / "team"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(SWARM)
    return Goondan(fresh_environment(tmp_path / "venv"), bundle)


def release(tmp_path: Path, index: Index) -> None:
    """Put acme-tools 1.1.0 on the index."""
    wheel = tmp_path / "later" / "acme_tools-1.1.0-py3-none-any.whl"
    wheel.rename(index.directory / wheel.name)


def sri(path: Path) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


def lock_entry(bundle: Path) -> dict[str, object]:
    lock = yaml.safe_load((bundle / "goondan.lock.yaml").read_text())
    assert lock["lockfileVersion"] == 1
    (entry,) = lock["packages"].values()
    assert isinstance(entry, dict)
    return entry


def test_add_records_installs_and_locks_and_the_swarm_calls_the_tool(
    index: Index, goondan: Goondan
) -> None:
    before = goondan("validate")
    assert before.returncode == 4
    assert "E_CONFIG_REF_NOT_FOUND" in before.stderr  # nothing declares the package yet

    added = goondan("package", "add", f"{PACKAGE}@^1.0.0", "--registry", index.url)

    assert added.returncode == 0, added.stderr
    assert f"installed {PACKAGE} 1.0.0 ({DISTRIBUTION})" in added.stdout
    text = (goondan.bundle / "goondan.yaml").read_text()
    assert text.startswith("# the team's swarm: comments and order must survive")
    assert '  version: "0.1.0"  # ours\n' in text
    assert '  dependencies:\n    - name: "@acme/tools"\n      version: "^1.0.0"\n' in text
    assert text.index("# dependencies come below") > text.index('version: "^1.0.0"')
    wheel = index.directory / "acme_tools-1.0.0-py3-none-any.whl"
    assert lock_entry(goondan.bundle) == {
        "name": PACKAGE,
        "distribution": DISTRIBUTION,
        "range": "^1.0.0",
        "version": "1.0.0",
        "resolved": index.url.replace("/simple/", f"/packages/{wheel.name}"),
        "integrity": sri(wheel),
        "dependencies": {},
    }
    assert goondan.installed() == "1.0.0"
    assert goondan("validate").returncode == 0
    assert goondan.answer() == "acme 1.0.0"


def test_install_takes_the_lockfile_and_update_moves_within_the_range(
    tmp_path: Path, index: Index, goondan: Goondan
) -> None:
    assert goondan("package", "add", PACKAGE, "--registry", index.url).returncode == 0
    assert '      version: "^1.0.0"\n' in (goondan.bundle / "goondan.yaml").read_text()
    locked = (goondan.bundle / "goondan.lock.yaml").read_text()
    release(tmp_path, index)  # 1.1.0 is out, within ^1.0.0

    fresh = Goondan(fresh_environment(tmp_path / "venv2"), goondan.bundle)
    assert fresh.installed() is None
    missing = fresh("validate")
    assert missing.returncode == 4
    assert (
        "goondan.yaml:9: Package/team: spec.dependencies[0]: package '@acme/tools' ^1.0.0 is "
        "not installed (distribution acme-tools) (E_CONFIG_PACKAGE_NOT_INSTALLED)\n"
        "  hint: run `goondan package install`" in missing.stderr
    )
    assert "E_CONFIG_REF_NOT_FOUND" not in missing.stderr  # the one cause, said once
    frozen = fresh("package", "install", "--frozen-lockfile", "--registry", index.url)
    assert frozen.returncode == 0, frozen.stderr
    assert fresh.installed() == "1.0.0"  # the lockfile's, not the newest
    assert (goondan.bundle / "goondan.lock.yaml").read_text() == locked

    updated = fresh("package", "update", "--registry", index.url)

    assert updated.returncode == 0, updated.stderr
    assert f"installed {PACKAGE} 1.1.0 (was 1.0.0)" in updated.stdout
    assert lock_entry(goondan.bundle)["version"] == "1.1.0"
    assert lock_entry(goondan.bundle)["integrity"] == sri(
        index.directory / "acme_tools-1.1.0-py3-none-any.whl"
    )
    assert fresh.installed() == "1.1.0"
    assert fresh.answer() == "acme 1.1.0"


def test_a_frozen_install_refuses_a_lockfile_that_drifted(index: Index, goondan: Goondan) -> None:
    config = goondan.bundle / "goondan.yaml"
    missing = goondan("package", "install", "--frozen-lockfile", "--registry", index.url)
    assert missing.returncode == 0  # no dependencies, nothing to refuse
    assert goondan("package", "add", f"{PACKAGE}@^1.0", "--registry", index.url).returncode == 0
    config.write_text(config.read_text().replace('version: "^1.0"', 'version: "~1.0.0"'))
    (goondan.bundle / "goondan.lock.yaml").rename(goondan.bundle / "kept.yaml")
    no_lock = goondan("package", "install", "--frozen-lockfile", "--registry", index.url)
    assert no_lock.returncode == 4
    assert "there is no" in no_lock.stderr
    (goondan.bundle / "kept.yaml").rename(goondan.bundle / "goondan.lock.yaml")

    drifted = goondan("package", "install", "--frozen-lockfile", "--registry", index.url)

    assert drifted.returncode == 4, drifted.stderr
    assert (
        "@acme/tools: the Package document asks for ~1.0.0, goondan.lock.yaml was resolved "
        "for ^1.0" in drifted.stderr
    )
    as_json = goondan("package", "install", "--frozen-lockfile", "--json")
    assert json.loads(as_json.stdout)["exitCode"] == 4
    relocked = goondan("package", "install", "--registry", index.url)
    assert relocked.returncode == 0, relocked.stderr
    assert lock_entry(goondan.bundle)["range"] == "~1.0.0"


def test_publish_uploads_with_the_credentials_of_the_environment_and_it_installs(
    tmp_path: Path, index: Index, goondan: Goondan
) -> None:
    source = write_package(tmp_path / "src-1.2.0", "1.2.0")
    publish = ("package", "publish", str(source), "--registry", index.upload_url)
    publish += ("--no-build-isolation",)

    dry = goondan(*publish, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would upload acme_tools-1.2.0-py3-none-any.whl, acme_tools-1.2.0.tar.gz" in dry.stdout
    refused = goondan(*publish, env={"TWINE_USERNAME": USERNAME, "TWINE_PASSWORD": "wrong-one"})
    assert refused.returncode == 6, refused.stderr
    assert "wrong-one" not in refused.stdout + refused.stderr
    assert not list(index.directory.glob("*1.2.0*"))

    published = goondan(*publish, env={"TWINE_USERNAME": USERNAME, "TWINE_PASSWORD": PASSWORD})

    assert published.returncode == 0, published.stderr
    assert PASSWORD not in published.stdout + published.stderr
    assert f"published {PACKAGE}" in published.stdout
    assert sorted(p.name for p in index.directory.glob("*1.2.0*")) == [
        "acme_tools-1.2.0-py3-none-any.whl",
        "acme_tools-1.2.0.tar.gz",
    ]
    added = goondan("package", "add", f"{PACKAGE}@^1.2.0", "--registry", index.url)
    assert added.returncode == 0, added.stderr
    assert goondan.installed() == "1.2.0"
    assert goondan.answer() == "acme 1.2.0"


def test_publish_refuses_a_project_that_is_no_goondan_package(
    tmp_path: Path, goondan: Goondan
) -> None:
    source = write_package(tmp_path / "plain", "1.0.0")
    pyproject = source / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().split("[project.entry-points")[0])

    done = goondan("package", "publish", str(source), "--dry-run", "--no-build-isolation")

    assert done.returncode == 4
    assert "no goondan.packages entry point: not a Goondan package" in done.stderr


def test_publish_without_the_extra_names_it(tmp_path: Path, goondan: Goondan) -> None:
    source = write_package(tmp_path / "src", "1.0.0")
    # the interpreter as it is without `build` installed: the import system finds no module
    program = (
        "import sys; sys.modules['build'] = None; from orchestrator.cli import main; "
        f"sys.exit(main(['package', 'publish', {str(source)!r}, '--dry-run']))"
    )
    done = subprocess.run(
        [str(goondan.python), "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert "pip install 'goondan-py[packages]'" in done.stderr
