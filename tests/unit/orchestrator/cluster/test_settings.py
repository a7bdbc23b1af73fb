"""What a cluster is told before it connects: placement, the bundle's fingerprint, settings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bundle import BundleError, load_bundle
from orchestrator.cluster.settings import ClusterSettings, cluster_token, redact_url
from tests.support.daemon import run_cli

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "cluster" / "goondan.yaml"

TOOLS = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: echo}
spec:
  entry: ./echo.py
  exports: [{name: say}]
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: rules, script: {rules: [{reply: hi}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {systemRef: ./prompt.md}
  tools: [Tool/echo]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: b}
spec:
  modelConfig: {modelRef: Model/m}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [Agent/a, Agent/b]
  placement: PLACEMENT
"""


def write(directory: Path, placement: str = "{b: {node: gpu-1}}") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "echo.py").write_text("handlers = {'say': lambda ctx, args: 'said'}\n")
    (directory / "prompt.md").write_text("You are a.\n")
    path = directory / "goondan.yaml"
    path.write_text(TOOLS.replace("PLACEMENT", placement))
    return path


def test_placement_maps_agents_to_nodes(tmp_path: Path) -> None:
    bundle = load_bundle(write(tmp_path), check_handlers=False)
    assert {a: p.named_nodes for a, p in bundle.placement().items()} == {"b": ("gpu-1",)}
    example = load_bundle(EXAMPLE, check_handlers=False).placement()
    assert {a: p.describe() for a, p in example.items()} == {
        "middle": "node-a",
        "back": "node-b",
    }


def test_placement_by_several_nodes_or_by_labels(tmp_path: Path) -> None:
    path = write(tmp_path, "{a: {nodes: [n2, n1], allowLeader: true}, b: {labels: {gpu: true}}}")
    placement = load_bundle(path, check_handlers=False).placement()

    several, labelled = placement["a"], placement["b"]
    assert several.named_nodes == ("n2", "n1")
    assert several.allow_leader is True
    assert several.admits("n1", {})
    assert not several.admits("n3", {})
    # YAML's `true` is compared as the text a node's --label gives.
    assert labelled.labels == {"gpu": "true"}
    assert labelled.admits("any-node", {"gpu": "true", "rack": "2"})
    assert not labelled.admits("any-node", {"gpu": "false"})
    assert not labelled.admits("any-node", {})
    assert labelled.allow_leader is False
    assert labelled.describe() == "gpu=true"


@pytest.mark.parametrize(
    ("placement", "field", "words"),
    [
        ("{b: {}}", "spec.placement.b", "`node`, `nodes` or `labels`"),
        ("{b: {node: n1, nodes: [n2]}}", "spec.placement.b", "not both"),
        ("{b: {nodes: []}}", "spec.placement.b.nodes", "at least 1"),
        ("{b: {nodes: [ok, 'bad name']}}", "spec.placement.b.nodes[1]", "pattern"),
        ("{b: {labels: {'bad key': x}}}", "spec.placement.b.labels.bad key", "pattern"),
        ("{b: {labels: {gpu: 'two words'}}}", "spec.placement.b.labels.gpu", "pattern"),
        ("{b: {node: n1, allowLeader: maybe}}", "spec.placement.b.allowLeader", "boolean"),
    ],
)
def test_a_bad_placement_names_file_line_resource_and_field(
    tmp_path: Path, placement: str, field: str, words: str
) -> None:
    path = write(tmp_path, placement)
    with pytest.raises(BundleError) as caught:
        load_bundle(path, check_handlers=False)
    [issue] = caught.value.errors
    assert (issue.file, issue.resource, issue.field) == (path, "Swarm/default", field)
    assert issue.line == TOOLS.splitlines().index("  placement: PLACEMENT") + 1
    assert words in issue.message


def test_node_labels_are_key_value_pairs_and_bad_ones_are_named() -> None:
    from orchestrator.cluster.node import parse_labels

    assert parse_labels(["gpu=true", "zone=eu-1", "gpu=true"]) == {"gpu": "true", "zone": "eu-1"}
    for bad, words in [
        ("gpu", "expected KEY=VALUE"),
        ("=x", "expected KEY=VALUE"),
        ("gpu=", "1 to 63"),
        ("gpu=a b", "1 to 63"),
    ]:
        with pytest.raises(ValueError, match=words) as caught:
            parse_labels([bad])
        assert repr(bad) in str(caught.value)
    with pytest.raises(ValueError, match="'gpu' given twice"):
        parse_labels(["gpu=true", "gpu=false"])


def test_placing_an_agent_outside_the_swarm_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "{b: {node: gpu-1}, ghost: {node: gpu-2}}")
    with pytest.raises(BundleError) as caught:
        load_bundle(path, check_handlers=False)
    [issue] = caught.value.errors
    assert issue.field == "spec.placement.ghost"
    assert issue.resource == "Swarm/default"
    assert issue.file == path
    assert issue.line == TOOLS.splitlines().index("  placement: PLACEMENT") + 1
    assert "ghost" in issue.message
    assert "a, b" in (issue.suggestion or "")


@pytest.mark.parametrize("node", ["gpu.1", "gpu 1", "", "-gpu", "x" * 64])
def test_a_node_name_that_cannot_name_a_subject_is_refused(tmp_path: Path, node: str) -> None:
    with pytest.raises(BundleError) as caught:
        load_bundle(write(tmp_path, f"{{b: {{node: '{node}'}}}}"), check_handlers=False)
    assert any(i.field == "spec.placement.b.node" for i in caught.value.errors)


def test_the_fingerprint_follows_content_not_location(tmp_path: Path) -> None:
    here = load_bundle(write(tmp_path / "here"), check_handlers=False).fingerprint()
    shutil.copytree(tmp_path / "here", tmp_path / "elsewhere" / "deeper")
    moved = load_bundle(tmp_path / "elsewhere" / "deeper", check_handlers=False)
    assert moved.fingerprint() == here

    (tmp_path / "here" / "prompt.md").write_text("You are a, changed.\n")
    assert load_bundle(write(tmp_path / "p"), check_handlers=False).fingerprint() == here
    prompt_changed = load_bundle(tmp_path / "here", check_handlers=False).fingerprint()
    assert prompt_changed != here

    (tmp_path / "p" / "echo.py").write_text("handlers = {'say': lambda ctx, args: 'other'}\n")
    assert load_bundle(tmp_path / "p", check_handlers=False).fingerprint() != here

    placed_elsewhere = write(tmp_path / "q", "{b: {node: gpu-2}}")
    assert load_bundle(placed_elsewhere, check_handlers=False).fingerprint() != here


def test_urls_are_shown_without_their_secrets() -> None:
    assert redact_url("nats://alice:pw@10.0.0.5:4222") == "nats://alice:***@10.0.0.5:4222"
    assert redact_url("nats://s3cr3t-token@host:4222") == "nats://***@host:4222"
    assert redact_url("nats://a:1@h1:4222, tls://h2:4443") == "nats://a:***@h1:4222,tls://h2:4443"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


def test_names_and_subjects_of_a_cluster() -> None:
    settings = ClusterSettings(url="nats://x:4222", name="my.swarm v2")
    assert cluster_token("my.swarm v2") == "my_swarm_v2"
    assert settings.prefix == "goondan.my_swarm_v2"
    assert settings.bucket == "goondan_my_swarm_v2"
    assert settings.node_subject("gpu-1", "start") == "goondan.my_swarm_v2.node.gpu-1.start"
    assert settings.worker_subject("ab12", "in") == "goondan.my_swarm_v2.w.ab12.in"
    assert settings.expiry_seconds == 3.0


def test_credentials_come_from_the_environment_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_NATS_USER", "ops")
    monkeypatch.setenv("GOONDAN_NATS_PASSWORD", "pw-from-env")
    creds = tmp_path / "user.creds"
    settings = ClusterSettings(url="nats://h:4222", name="s", creds_file=creds)
    options = settings.connect_options()
    assert (options["user"], options["password"]) == ("ops", "pw-from-env")
    assert options["user_credentials"] == str(creds)
    assert options["servers"] == ["nats://h:4222"]
    assert "tls" not in options
    assert "pw-from-env" not in settings.describe()

    monkeypatch.delenv("GOONDAN_NATS_PASSWORD")
    monkeypatch.setenv("GOONDAN_NATS_TOKEN", "tok")
    tls = ClusterSettings(url="tls://h:4443", name="s").connect_options()
    assert tls["token"] == "tok"
    assert tls["tls"] is not None


def test_a_node_needs_a_cluster_and_a_name_fit_for_subjects(tmp_path: Path) -> None:
    path = write(tmp_path)
    missing = run_cli("node", str(path), "--name", "gpu-1", cwd=tmp_path)
    assert missing.returncode == 2
    assert "--cluster" in missing.stderr
    dotted = run_cli("node", str(path), "--name", "gpu.1", "--cluster", "nats://x:1", cwd=tmp_path)
    assert dotted.returncode == 2
    assert "node name 'gpu.1'" in dotted.stderr


def test_the_compose_example_runs_the_nodes_the_example_places(tmp_path: Path) -> None:
    import yaml

    compose = yaml.safe_load((EXAMPLE.parent / "docker-compose.yaml").read_text())
    services = compose["services"]
    nodes = {
        command.split("--name ")[1].split()[0]
        for service in services.values()
        if " node " in f" {(command := service.get('command', ''))} "
    }
    placement = load_bundle(EXAMPLE, check_handlers=False).placement()
    placed = {node for rule in placement.values() for node in rule.named_nodes}
    assert nodes == placed == {"node-a", "node-b"}
    assert "--cluster nats://nats:4222" in services["leader"]["command"]
    assert services["leader"]["build"] == "../.."  # the repository's Dockerfile


def test_the_compose_example_gives_each_member_its_own_user_of_the_nats_conf() -> None:
    import re

    import yaml

    compose = yaml.safe_load((EXAMPLE.parent / "docker-compose.yaml").read_text())
    services = compose["services"]
    conf = (EXAMPLE.parent / "nats.conf").read_text()
    users = dict(re.findall(r"\{ user: ([\w-]+), password: \$(\w+),", conf))
    members = {name: s["environment"] for name, s in services.items() if name != "nats"}
    assert {env["GOONDAN_NATS_USER"] for env in members.values()} == {"leader", "node-a", "node-b"}
    for env in members.values():
        # Its own password variable, the one nats.conf reads for its user.
        assert env["GOONDAN_NATS_PASSWORD"].startswith("${" + users[env["GOONDAN_NATS_USER"]])
        assert env["GOONDAN_CLUSTER_KEY"].startswith("${GOONDAN_CLUSTER_KEY:?")
    assert set(services["nats"]["environment"]) == set(users.values())
    assert "no_auth_user" not in conf  # nobody gets in without credentials
