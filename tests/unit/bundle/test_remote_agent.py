"""``kind: RemoteAgent`` and a Swarm listing one: what reaches the plans, and every misuse
refused with its file, line, resource and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from bundle.errors import ConfigIssue
from bundle.spec_remote import RemoteAgentSpec
from tests.support.readme import section

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "front-doors" / "a2a-remote.md"
MODEL_AND_AGENT = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: rules
  script: {rules: [{reply: hi}]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: front}
spec:
  modelConfig: {modelRef: Model/m}
---
"""
REMOTE = """\
apiVersion: goondan.ai/v1
kind: RemoteAgent
metadata: {name: partner}
spec:
SPEC---
"""
GOOD_REMOTE = """\
  cardUrl: https://partner.example.com/.well-known/agent-card.json
  description: Another team's research agent.
  timeoutSeconds: 30
  auth: {bearer: {valueFrom: {env: PARTNER_A2A_TOKEN}}}
"""
SWARM = """\
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: s}
spec:
  entryAgent: ENTRY
  agents: AGENTS
EXTRA"""


def write(
    tmp_path: Path,
    remote: str = GOOD_REMOTE,
    agents: str = "[Agent/front, RemoteAgent/partner]",
    entry: str = "Agent/front",
    extra: str = "",
    more: str = "",
) -> Path:
    path = tmp_path / "goondan.yaml"
    swarm = SWARM.replace("ENTRY", entry).replace("AGENTS", agents).replace("EXTRA", extra)
    path.write_text(MODEL_AND_AGENT + more + REMOTE.replace("SPEC", remote) + swarm)
    return path


def issues(path: Path) -> list[ConfigIssue]:
    with pytest.raises(BundleError) as caught:
        load_bundle(path)
    return caught.value.errors


def test_a_remote_agent_is_a_delegation_target_of_the_local_agents(tmp_path: Path) -> None:
    bundle = load_bundle(write(tmp_path))
    swarm = bundle.swarm()
    assert [a.name for a in bundle.swarm_agents(swarm)] == ["front"]
    assert [r.name for r in bundle.swarm_remote_agents(swarm)] == ["partner"]
    plan = bundle.agent_plan("front", tmp_path / "state")
    assert plan.agents == ["front", "partner"]
    spec = bundle.get("RemoteAgent", "partner").spec
    assert spec.timeout_seconds == 30
    assert spec.auth.bearer.value_from.env == "PARTNER_A2A_TOKEN"
    assert "1 RemoteAgent" in bundle.summary()


@pytest.mark.parametrize(
    ("card_url", "said"),
    [
        ("ftp://partner.example.com/card.json", "must be an http:// or https:// URL"),
        ("https:///card.json", "must be an http:// or https:// URL with a host"),
        ("https://user:pw@partner.example.com/card.json", "must not carry credentials"),
        ("https://partner.example.com/card.json#top", "must not have a #fragment"),
        ("https://partner.example.com:99999/card.json", "out of range"),
    ],
)
def test_a_card_url_that_is_not_a_plain_http_url_is_refused(
    tmp_path: Path, card_url: str, said: str
) -> None:
    (issue,) = issues(write(tmp_path, remote=f"  cardUrl: {card_url}\n"))
    assert said in issue.message
    assert (issue.resource, issue.field, issue.line) == ("RemoteAgent/partner", "spec.cardUrl", 19)
    assert issue.file == tmp_path / "goondan.yaml"


@pytest.mark.parametrize(
    ("remote", "field"),
    [
        ("  cardUrl: https://p.example/c.json\n  auth: {bearer: {value: abc}}\n", "value"),
        ("  cardUrl: https://p.example/c.json\n  timeoutSeconds: 0\n", "timeoutSeconds"),
        ("  cardUrl: https://p.example/c.json\n  timeoutSecond: 5\n", "timeoutSecond"),
        ("  description: no card\n", "cardUrl"),
    ],
)
def test_a_bad_remote_agent_field_is_named(tmp_path: Path, remote: str, field: str) -> None:
    found = issues(write(tmp_path, remote=remote))
    assert found
    assert all(i.resource == "RemoteAgent/partner" for i in found)
    assert any(field in (i.field or "") for i in found)


def test_a_remote_agent_cannot_be_the_entry(tmp_path: Path) -> None:
    (issue,) = issues(write(tmp_path, entry="RemoteAgent/partner"))
    assert (issue.resource, issue.field) == ("Swarm/s", "spec.entryAgent")
    assert "a RemoteAgent runs no Turn here" in issue.message
    assert issue.suggestion is not None
    assert "delegate to partner" in issue.suggestion


@pytest.mark.parametrize(
    ("written", "field", "said"),
    [
        (
            {"agents": "[Agent/front, Model/m]"},
            "spec.agents[1]",
            "expected a reference to an Agent or a RemoteAgent, got Model/m",
        ),
        (
            {"agents": "[Agent/front, RemoteAgent/ghost]"},
            "spec.agents[1]",
            "RemoteAgent/ghost not found",
        ),
        (
            {"agents": "[Agent/front, {ref: RemoteAgent/partner, config: {a: 1}}]"},
            "spec.agents[1].config",
            "RemoteAgent/partner takes no per-use config",
        ),
        (
            {"extra": "  placement: {partner: {node: gpu-1}}\n"},
            "spec.placement.partner",
            "placement names RemoteAgent 'partner'",
        ),
        (
            {"extra": "  expose: {a2a: [front, partner]}\n"},
            "spec.expose.a2a[1]",
            "front doors serve local agents only",
        ),
    ],
)
def test_a_swarm_uses_a_remote_agent_only_as_a_delegation_target(
    tmp_path: Path, written: dict[str, str], field: str, said: str
) -> None:
    (issue,) = issues(write(tmp_path, **written))
    assert (issue.resource, issue.field) == ("Swarm/s", field)
    assert said in issue.message
    assert issue.line is not None


def test_an_agent_and_a_remote_agent_of_one_swarm_need_different_names(tmp_path: Path) -> None:
    twin = REMOTE.replace("partner", "front").replace("SPEC", GOOD_REMOTE)
    path = write(tmp_path, agents="[Agent/front, RemoteAgent/front]", more=twin)
    (issue,) = issues(path)
    assert (issue.resource, issue.field) == ("Swarm/s", "spec.agents[1]")
    assert "both named 'front'" in issue.message


def test_a_remote_agent_without_the_a2a_extra_does_not_validate(tmp_path: Path) -> None:
    path = write(tmp_path)
    # A fresh interpreter where the a2a-sdk cannot be imported, as in a core install.
    script = (
        "import sys; sys.modules['a2a'] = None\n"
        "from bundle import BundleError, load_bundle\n"
        "try:\n"
        f"    load_bundle({str(path)!r})\n"
        "except BundleError as exc:\n"
        "    print(exc)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "kind RemoteAgent is called through the a2a-sdk, which is not installed" in done.stdout
    assert "pip install 'goondan-py[a2a]'" in done.stdout
    assert "RemoteAgent/partner" in done.stdout


def test_the_documented_example_validates_and_every_field_is_documented(tmp_path: Path) -> None:
    (block,) = section("RemoteAgent", DOCS).blocks_of("yaml")
    path = tmp_path / "goondan.yaml"
    path.write_text(block.text)
    bundle = load_bundle(path)
    assert bundle.agent_plan("desk", tmp_path / "state").agents == ["desk", "researcher"]
    text = DOCS.read_text()
    for name, info in RemoteAgentSpec.model_fields.items():
        assert f"| `{info.alias or name}" in text
