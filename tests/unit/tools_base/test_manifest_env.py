"""The ``@goondan/base`` manifest declares every variable its modules read from the environment:
an agent or connector process gets no other (bundle.environment)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from tools_base.tools import discord, github, slack, telegram

PACKAGE = Path(__file__).resolve().parents[3] / "tools_base"
HTTP_SETTINGS = ("{}_HOST", "{}_PORT", "PORT", "{}_PATH", "{}_MAX_BODY_BYTES")
"""What ``connectors._http.listen_settings`` reads for a prefix."""
NOT_SETTINGS = {"POST"}


def declared(kind: str, name: str) -> list[str]:
    for data in yaml.safe_load_all((PACKAGE / "goondan.yaml").read_text()):
        if data.get("kind") == kind and data["metadata"]["name"] == name:
            env: list[str] = data["spec"].get("env", [])
            return env
    raise AssertionError(f"{kind}/{name} is not in the manifest")


@pytest.mark.parametrize(
    ("name", "module"),
    [("telegram", telegram), ("slack", slack), ("discord", discord), ("github", github)],
)
def test_chat_tools_declare_their_token_variables(name: str, module: object) -> None:
    """The token variables, then the application id (discord), then the settings shared with
    the tool's connector, in that order."""
    expected = list(module.TOKEN_ENV)  # type: ignore[attr-defined]
    if hasattr(module, "APPLICATION_ENV"):
        expected.append(module.APPLICATION_ENV)
    shared = getattr(module, "SHARED", None)
    if shared is not None:
        expected += [shared.base_url, shared.allowed_hosts]
        expected += [shared.allow_plain_http] if shared.allow_plain_http else []
    assert declared("Tool", name) == expected


def settings_read(path: Path) -> set[str]:
    """The setting names a connector module spells out, with the listener settings of each
    prefix it hands ``listen_settings``."""
    tree = ast.parse(path.read_text())
    prefixes = {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "listen_settings"
        and isinstance(node.args[1], ast.Constant)
    }
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", node.value)
    }
    expanded = {form.format(p) for p in prefixes for form in HTTP_SETTINGS}
    return (names - prefixes - NOT_SETTINGS) | expanded


HELPERS = {
    "telegram": ["_telegram_api.py", "_telegram_webhook.py"],
    "webhook": ["_reply.py"],
}
"""Modules of a connector's own that read settings too."""


@pytest.mark.parametrize("connector", ["webhook", "slack", "github", "discord", "telegram", "cli"])
def test_connectors_declare_every_setting_they_read(connector: str) -> None:
    path = PACKAGE / "connectors" / f"{connector}.py"
    read = settings_read(path)
    for helper in HELPERS.get(connector, ()):
        read |= settings_read(PACKAGE / "connectors" / helper)
    assert set(declared("Connector", connector)) == read
