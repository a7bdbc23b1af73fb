"""``validate`` refuses a Model whose provider no agent could start with here."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from goondan.providers import PROVIDERS, provider, sdk_installed
from tests.support.daemon import run_cli

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: brain}}
spec: {{provider: {provider}, model: some-model}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: writer}}
spec: {{modelConfig: {{modelRef: Model/brain}}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec: {{entryAgent: Agent/writer, agents: [Agent/writer]}}
"""
BLOCKER = """\
import sys


class _Missing:
    # Makes the SDK look uninstalled, to lookups and imports alike.
    def find_spec(self, name, path=None, target=None):
        if name == "{module}" or name.startswith("{module}."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Missing())
"""


def swarm(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "goondan.yaml"
    path.write_text(SWARM.format(provider=name))
    return path


def without(tmp_path: Path, module: str) -> dict[str, str]:
    """The environment of a Python in which ``module`` is not installed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(module=module))
    return {**os.environ, "PYTHONPATH": str(site)}


def test_google_without_its_sdk_fails_validate_naming_the_extra(tmp_path: Path) -> None:
    path = swarm(tmp_path, "google")
    done = run_cli("validate", str(path), cwd=tmp_path, env=without(tmp_path, "google.genai"))
    assert done.returncode == 4, done.stderr
    assert "goondan.yaml:4: Model/brain: spec.provider:" in done.stderr
    assert "google-genai SDK, which is not installed (E_MODEL_PROVIDER_UNAVAILABLE)" in done.stderr
    assert "hint: pip install 'goondan-py[google]'" in done.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("google.genai") is None, reason="google-genai is not installed"
)
def test_google_with_its_sdk_validates(tmp_path: Path) -> None:
    done = run_cli("validate", str(swarm(tmp_path, "google")), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_an_unknown_provider_fails_validate(tmp_path: Path) -> None:
    done = run_cli("validate", str(swarm(tmp_path, "gemini")), "--json", cwd=tmp_path)
    assert done.returncode == 4
    assert '"message": "unknown provider \'gemini\': no agent could start with it"' in done.stdout
    assert "use scripted, openai, anthropic or google" in done.stdout


def test_provider_names_are_case_insensitive(tmp_path: Path) -> None:
    load_bundle(swarm(tmp_path, "OpenAI"), check_handlers=False, check_providers=True)


def test_a_load_that_does_not_ask_does_not_check(tmp_path: Path) -> None:
    # A leader of a cluster may run without the SDK of a Model only another host uses.
    load_bundle(swarm(tmp_path, "elsewhere"), check_handlers=False)
    with pytest.raises(BundleError, match="unknown provider 'elsewhere'"):
        load_bundle(swarm(tmp_path, "elsewhere"), check_handlers=False, check_providers=True)


def test_every_provider_with_an_sdk_names_its_extra() -> None:
    assert provider("GOOGLE") is PROVIDERS["google"]
    assert PROVIDERS["google"].install == "pip install 'goondan-py[google]'"
    assert PROVIDERS["scripted"].install is None
    assert sdk_installed(PROVIDERS["scripted"])
    extras = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    for known in PROVIDERS.values():
        if known.extra is not None:
            assert f'\n{known.extra} = ["{known.sdk}' in extras, known
