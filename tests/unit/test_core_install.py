"""The core install (``pip install goondan-py``, no extra) imports every module of the runtime
but those of an extra's feature: a dependency that moved to an extra is imported where its
feature is used, never at the top of a module the core loads.

The development environment has every extra, so a child Python sees only the core's
distributions (``tests.support.core_install``) and imports each module of our packages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.core_install import (
    ROOT,
    core_closure,
    core_only_site,
    core_requirements,
    modules_outside,
)

PACKAGES = ("goondan", "bundle", "ipc", "tools_base", "agent_process", "connector_process")
EXTRA_ONLY = {
    "orchestrator.cli.instance_view": "textual",  # tui
    "orchestrator.http.a2a_card": "a2a",  # a2a
    "orchestrator.http.a2a_server": "a2a",
    "orchestrator.http.a2a_tasks": "a2a",
    "orchestrator.http.mcp_tools": "mcp_types",  # mcp
    "orchestrator.remote_agent_calls": "httpx",  # a2a (the SDK's HTTP client)
    "orchestrator.telemetry.otlp": "opentelemetry",  # otel
    "orchestrator.testing_suite.pytest_plugin": "pytest",  # a pytest plugin, run by pytest
}
"""Modules that exist for an extra's feature, and the module of that extra each needs: the
core imports them only once the feature is asked for (and says which extra to install)."""

IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
for root in sys.argv[1:]:
    package = importlib.import_module(root)
    for found in pkgutil.walk_packages(package.__path__, root + "."):
        if ".templates" in found.name:
            continue  # what `init` copies into a new swarm, not runtime modules
        try:
            importlib.import_module(found.name)
        except ImportError as exc:
            print(found.name, exc.name)
"""


def test_the_core_install_imports_every_module_but_an_extras(tmp_path: Path) -> None:
    site = core_only_site(tmp_path / "site")
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_MODULE, *PACKAGES, "orchestrator"],
        cwd=ROOT,
        env={"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    failed = dict(line.split() for line in done.stdout.splitlines())
    assert failed == EXTRA_ONLY


def test_the_core_hides_what_an_extra_installs_and_keeps_what_the_core_needs() -> None:
    core = set(core_closure(core_requirements()))
    assert {"pydantic", "starlette", "uvicorn", "structlog", "msgspec"} <= core
    assert not {"rich", "genai-prices", "httpx", "openai", "textual"} & core
    outside = modules_outside(core)
    assert {"genai_prices", "rich", "openai", "a2a", "textual", "httpx"} <= outside
    assert not {"pydantic", "starlette", "yaml", "msgspec", "croniter", "httpx2"} & outside
