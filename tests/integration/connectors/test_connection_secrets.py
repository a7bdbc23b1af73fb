"""A Connection whose secret is not set is named by ``doctor`` and stops ``run`` (exit 6)
before anything starts, as a Model's missing API key is; the connector never crash-loops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.daemon import run_cli
from tests.support.studio import EXAMPLE

SECRETS = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN", "DISCORD_PUBLIC_KEY")
CLEAN_PREFIX = "GOONDAN_SECRET_"
CLEAN = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith(CLEAN_PREFIX)}

TELEGRAM = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: chat}
spec:
  connectorRef: {kind: Connector, name: telegram, package: "@goondan/base"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: TELEGRAM_BOT_TOKEN}}
"""
DISCORD = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: interactions}
spec:
  connectorRef: {kind: Connector, name: discord, package: "@goondan/base"}
  config: {DISCORD_WEBHOOK_PORT: {value: "0"}}
"""
WEBHOOK = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: hooks}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config: {WEBHOOK_PORT: {value: "0"}}
"""


def swarm_with(directory: Path, *connections: str) -> Path:
    (directory / "goondan.yaml").write_text(EXAMPLE.read_text() + "".join(connections))
    return directory


def doctor(directory: Path, **env: str) -> tuple[int, list[dict[str, object]]]:
    done = run_cli("doctor", "--json", cwd=directory, env={**CLEAN, **env}, timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == report["exitCode"]
    return done.returncode, [c for c in report["checks"] if c["level"] == "fail"]


def test_doctor_names_the_connection_and_the_variable_its_secret_reads(tmp_path: Path) -> None:
    here = swarm_with(tmp_path, TELEGRAM)
    status, failed = doctor(here)
    assert status == 6
    [check] = failed
    assert check["name"] == "connection chat TELEGRAM_BOT_TOKEN"
    assert "Connection/chat" in str(check["detail"])
    assert "TELEGRAM_BOT_TOKEN" in str(check["detail"])
    assert "secrets.TELEGRAM_BOT_TOKEN" in str(check["detail"])
    assert ".env" in str(check["fix"])

    status, failed = doctor(here, TELEGRAM_BOT_TOKEN="123:not-a-real-token")
    assert (status, failed) == (0, [])


def test_a_setting_the_connector_requires_is_checked_though_the_connection_omits_it(
    tmp_path: Path,
) -> None:
    here = swarm_with(tmp_path, DISCORD, WEBHOOK)
    status, failed = doctor(here)
    assert status == 6
    # The webhook's secret is optional (it listens on loopback only): no finding for it.
    [check] = failed
    assert check["name"] == "connection interactions DISCORD_PUBLIC_KEY"
    assert "Connector/discord requires it" in str(check["detail"])
    assert "secrets" in str(check["fix"])
    assert doctor(here, DISCORD_PUBLIC_KEY="ab" * 32) == (0, [])


@pytest.mark.parametrize("how", [("--input", "write a.txt hi"), ()])
def test_run_exits_6_naming_the_variable_before_starting_anything(
    tmp_path: Path, how: tuple[str, ...]
) -> None:
    here = swarm_with(tmp_path, TELEGRAM)
    ran = run_cli("run", *how, cwd=here, env=CLEAN, timeout=120)
    assert ran.returncode == 6, ran.stderr
    assert "Connection/chat needs TELEGRAM_BOT_TOKEN" in ran.stderr
    assert not (here / ".goondan" / "agents").exists()  # no agent was started
    assert not (here / ".goondan" / "connections").exists()  # nor the connector

    as_json = run_cli("run", *how, "--json", cwd=here, env=CLEAN, timeout=120)
    answer = json.loads(as_json.stdout)
    assert (as_json.returncode, answer["exitCode"]) == (6, 6)
    assert "TELEGRAM_BOT_TOKEN" in answer["error"]["message"]


def test_a_secret_ref_is_satisfied_by_any_variable_it_is_read_from(tmp_path: Path) -> None:
    here = swarm_with(
        tmp_path,
        WEBHOOK.replace(
            'config: {WEBHOOK_PORT: {value: "0"}}',
            "secrets: {signingSecret: {valueFrom: {secretRef: {ref: Secret/hook, key: key}}}}",
        ),
    )
    status, failed = doctor(here)
    assert status == 6
    assert "one of GOONDAN_SECRET_HOOK_KEY" in str(failed[0]["detail"])
    assert doctor(here, GOONDAN_SECRET_HOOK_KEY="s3cret-value") == (0, [])
