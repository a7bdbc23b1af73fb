"""Package dependencies: semver ranges as PEP 440, distribution names, the lockfile, edits of
the Package document, and what a bundle says of a dependency it cannot use."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bundle import BundleError, load_bundle
from bundle.lockfile import (
    LockedPackage,
    Lockfile,
    LockfileError,
    differences,
    integrity,
    integrity_hex,
    read_lockfile,
)
from bundle.package_doc import read_package, set_dependency
from bundle.packages import Dependency, distribution_name
from bundle.ranges import RangeError, pep440_specifier
from bundle.spec_package import PackageDependency


@pytest.mark.parametrize(
    ("range_", "specifier"),
    [
        ("^1.2.3", ">=1.2.3,<2"),
        ("^0.2.3", ">=0.2.3,<0.3"),
        ("^0.0.3", ">=0.0.3,<0.0.4"),
        ("^0.0.0", ">=0.0.0,<0.0.1"),
        ("^1.2", ">=1.2,<2"),
        ("^0.2", ">=0.2,<0.3"),
        ("^0.0", ">=0.0,<0.1"),
        ("^1", ">=1,<2"),
        ("^0", ">=0,<1"),
        ("^1.x", ">=1,<2"),
        ("~1.2.3", ">=1.2.3,<1.3"),
        ("~1.2", ">=1.2,<1.3"),
        ("~1", ">=1,<2"),
        ("~0.2.3", ">=0.2.3,<0.3"),
        ("1.2.3", "==1.2.3"),
        ("=1.2.3", "==1.2.3"),
        ("v1.2.3", "==1.2.3"),
        ("1.2", "==1.2.*"),
        ("1.2.x", "==1.2.*"),
        ("1", "==1.*"),
        ("1.X", "==1.*"),
        ("*", ""),
        ("x", ""),
        ("", ""),
        (">=1.2.3", ">=1.2.3"),
        (">1.2.3", ">1.2.3"),
        (">1.2", ">=1.3"),
        (">1", ">=2"),
        ("<1.2", "<1.2"),
        ("<=1.2.3", "<=1.2.3"),
        ("<=1.2", "<1.3"),
        (">=1.0.0 <2.0.0", ">=1.0.0,<2.0.0"),
        (">= 1.0.0 < 2", ">=1.0.0,<2"),
        ("1.2.3 - 2.3.4", ">=1.2.3,<=2.3.4"),
        ("1.2 - 2.3", ">=1.2,<2.4"),
        ("1.2.3 - 2", ">=1.2.3,<3"),
        ("^1.0.0-beta.2", ">=1.0.0b2,<2"),
        ("1.0.0-rc1", "==1.0.0rc1"),
        ("^1.0.0-alpha", ">=1.0.0a0,<2"),
        ("1.2.3+build.7", "==1.2.3"),
        (">=1.0,<2", "<2,>=1.0"),  # PEP 440 already: taken as it is
        ("~=1.4", "~=1.4"),
    ],
)
def test_a_semver_range_reads_as_its_pep_440_specifier(range_: str, specifier: str) -> None:
    assert pep440_specifier(range_) == specifier


@pytest.mark.parametrize(
    ("range_", "why"),
    [
        ("^1.0.0 || ^2.0.0", "union"),
        ("latest", "not a version"),
        ("^1.0.0-snapshot", "pre-release"),
        ("~=1", "not a PEP 440 specifier"),
    ],
)
def test_a_range_with_no_pep_440_form_is_refused(range_: str, why: str) -> None:
    with pytest.raises(RangeError, match=why):
        pep440_specifier(range_)


def test_the_translation_agrees_with_npm_on_which_versions_match() -> None:
    caret = Dependency.of(PackageDependency(name="@acme/tools", version="^1.2.3"))
    assert [v for v in ("1.2.2", "1.2.3", "1.9.0", "2.0.0", "2.0.0a1") if caret.allows(v)] == [
        "1.2.3",
        "1.9.0",
    ]
    tilde = Dependency.of(PackageDependency(name="t", version="~0.2.3"))
    assert [v for v in ("0.2.3", "0.2.9", "0.3.0") if tilde.allows(v)] == ["0.2.3", "0.2.9"]


@pytest.mark.parametrize(
    ("package", "distribution"),
    [("@acme/tools", "acme-tools"), ("tools", "tools"), ("@Acme_Co/my.tools", "acme-co-my-tools")],
)
def test_a_package_name_maps_to_its_distribution(package: str, distribution: str) -> None:
    assert distribution_name(package) == distribution


def test_an_explicit_distribution_wins() -> None:
    declared = PackageDependency(name="@acme/tools", version="^1", distribution="Acme_Goondan")
    dependency = Dependency.of(declared)
    assert (dependency.distribution, dependency.requirement) == (
        "acme-goondan",
        "acme-goondan>=1,<2",
    )


def _locked(version: str = "1.1.0", range_: str | None = "^1.0.0") -> LockedPackage:
    return LockedPackage(
        name="@acme/tools",
        distribution="acme-tools",
        version=version,
        resolved=f"https://index.example/acme_tools-{version}-py3-none-any.whl",
        integrity=integrity("ab" * 32),
        range=range_,
    )


def test_the_lockfile_reads_back_as_written(tmp_path: Path) -> None:
    pulled = LockedPackage(
        name="idna",
        distribution="idna",
        version="3.10",
        resolved="https://index.example/idna-3.10-py3-none-any.whl",
        integrity=integrity("cd" * 32),
    )
    lockfile = Lockfile((_locked(), pulled))
    lockfile.write(tmp_path / "goondan.lock.yaml")
    data = yaml.safe_load((tmp_path / "goondan.lock.yaml").read_text())
    assert data["lockfileVersion"] == 1
    assert list(data["packages"]) == ["@acme/tools@1.1.0", "idna@3.10"]
    assert data["packages"]["idna@3.10"]["version"] == "3.10"  # a string, not 3.1
    assert read_lockfile(tmp_path / "goondan.lock.yaml") == lockfile
    assert read_lockfile(tmp_path / "absent.yaml") is None


def test_integrity_is_sri_sha256() -> None:
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of b""
    assert integrity(empty) == "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    assert integrity_hex(integrity("12" * 32)) == "12" * 32
    with pytest.raises(LockfileError):
        integrity_hex("sha512-AAAA")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lockfileVersion: 2\npackages: {}\n", "lockfileVersion 2 is not 1"),
        ("[unclosed", "is not YAML"),
        ("lockfileVersion: 1\npackages:\n  a@1: {name: a}\n", "packages.a@1: distribution"),
    ],
)
def test_a_broken_lockfile_is_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "goondan.lock.yaml").write_text(text)
    with pytest.raises(LockfileError, match=message):
        read_lockfile(tmp_path / "goondan.lock.yaml")


def test_every_difference_between_document_and_lockfile_is_named() -> None:
    def dependency(version: str, name: str = "@acme/tools") -> Dependency:
        return Dependency.of(PackageDependency(name=name, version=version))

    lockfile = Lockfile((_locked(),))
    assert differences([dependency("^1.0.0")], lockfile) == []
    assert differences([dependency("^2.0.0")], lockfile) == [
        "@acme/tools: the Package document asks for ^2.0.0, goondan.lock.yaml was resolved "
        "for ^1.0.0"
    ]
    assert differences([dependency("^1.0.0"), dependency("^3", "other")], lockfile) == [
        "other ^3 is in the Package document, not in goondan.lock.yaml"
    ]
    assert differences([], lockfile) == [
        "@acme/tools is in goondan.lock.yaml, not in the Package document"
    ]
    drifted = Lockfile((_locked("2.0.0"),))
    assert differences([dependency("^1.0.0")], drifted) == [
        "@acme/tools: goondan.lock.yaml pins 2.0.0, outside ^1.0.0"
    ]


PACKAGE_DOC = """\
# our swarm
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: team  # the name
spec:
  version: "0.1.0"   # ours
{rest}---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: rules, script: {{rules: [{{reply: hi}}]}}}}
"""


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        (
            "  # more below\n",
            '  version: "0.1.0"   # ours\n  dependencies:\n    - name: "@acme/tools"\n'
            '      version: "^1.0.0"\n  # more below\n',
        ),
        (
            "  dependencies: []  # none yet\n",
            '  dependencies:\n    - name: "@acme/tools"\n      version: "^1.0.0"\n---',
        ),
        (
            "  dependencies:\n  - name: other  # indentless\n    version: ^2.0.0\n",
            '  - name: other  # indentless\n    version: ^2.0.0\n  - name: "@acme/tools"\n'
            '    version: "^1.0.0"\n---',
        ),
        (
            '  dependencies:\n    - name: "@acme/tools"\n      version: ^0.9.0  # was\n'
            "    - {name: other, version: '1'}\n",
            '    - name: "@acme/tools"\n      version: "^1.0.0"  # was\n'
            "    - {name: other, version: '1'}\n",
        ),
    ],
)
def test_adding_a_dependency_keeps_comments_and_order(
    tmp_path: Path, rest: str, expected: str
) -> None:
    config = tmp_path / "goondan.yaml"
    config.write_text(PACKAGE_DOC.format(rest=rest))

    set_dependency(config, "@acme/tools", "^1.0.0")

    text = config.read_text()
    assert expected in text
    assert text.startswith("# our swarm\n")
    assert "  name: team  # the name\n" in text
    assert text.endswith(PACKAGE_DOC.split("---\n", 1)[1].format())
    deps = read_package(config).spec.dependencies
    assert PackageDependency(name="@acme/tools", version="^1.0.0") in deps


def test_a_file_without_a_package_document_gets_one_on_top(tmp_path: Path) -> None:
    config = tmp_path / "my swarm" / "goondan.yaml"
    config.parent.mkdir()
    model = PACKAGE_DOC.split("---\n", 1)[1].format()
    config.write_text(model)

    set_dependency(config, "@acme/tools", ">=1.0", distribution="acme-goondan")

    document = read_package(config)
    assert document.name == "my-swarm"
    assert document.spec.dependencies == [
        PackageDependency(name="@acme/tools", version=">=1.0", distribution="acme-goondan")
    ]
    assert config.read_text().endswith("---\n" + model)
    created = tmp_path / "new" / "goondan.yaml"
    created.parent.mkdir()
    set_dependency(created, "tools", "^2")
    assert read_package(created).spec.dependencies[0].version == "^2"


SWARM_WITH_DEPENDENCY = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: team}}
spec:
  dependencies:
    - {dependency}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: rules, script: {{rules: [{{reply: hi}}]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: a}}
spec:
  modelConfig: {{modelRef: Model/m}}
  tools:
    - ref: {{kind: Tool, name: thing, package: "@acme/tools"}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec: {{entryAgent: Agent/a, agents: [Agent/a]}}
"""


@pytest.mark.parametrize(
    ("dependency", "code", "message"),
    [
        (
            '{name: "@acme/tools", version: ^1.0.0}',
            "E_CONFIG_PACKAGE_NOT_INSTALLED",
            "package '@acme/tools' ^1.0.0 is not installed (distribution acme-tools)",
        ),
        (
            '{name: "@acme/tools", version: ^1.0.0, distribution: pyyaml}',
            "E_CONFIG_PACKAGE_NOT_INSTALLED",
            "package '@acme/tools': pyyaml 6.",
        ),
        (
            '{name: "@acme/tools", version: ">=5", distribution: pyyaml}',
            "E_CONFIG_PACKAGE_NOT_INSTALLED",
            "installed but provides no such Goondan package",
        ),
        (
            '{name: "@acme/tools", version: "^1 || ^2"}',
            "E_CONFIG_SCHEMA_INVALID",
            "a union (||) has no PEP 440 form",
        ),
    ],
)
def test_a_dependency_that_cannot_be_used_is_named_once(
    tmp_path: Path, dependency: str, code: str, message: str
) -> None:
    config = tmp_path / "goondan.yaml"
    config.write_text(SWARM_WITH_DEPENDENCY.format(dependency=dependency))

    with pytest.raises(BundleError) as caught:
        load_bundle(config, check_handlers=False)

    issues = [i for i in caught.value.errors if i.code != "E_CONFIG_REF_NOT_FOUND"]
    assert [(i.code, i.line) for i in issues] == [(code, 6)]
    assert message in issues[0].message
    if code == "E_CONFIG_PACKAGE_NOT_INSTALLED":
        assert issues[0].suggestion == "run `goondan package install`"
        assert len(caught.value.errors) == 1  # no ref error besides: one cause, said once


def test_goondan_s_own_package_needs_no_install(tmp_path: Path) -> None:
    config = tmp_path / "goondan.yaml"
    text = SWARM_WITH_DEPENDENCY.format(dependency='{name: "@goondan/base", version: ^0.1.0}')
    config.write_text(
        text.replace('name: thing, package: "@acme/tools"', 'name: wait, package: "@goondan/base"')
    )
    assert load_bundle(config, check_handlers=False).resources
