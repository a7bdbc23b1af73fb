"""The JetStream store's names and credentials, without a server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_process.jetstream_link import (
    PASSWORD_ENV,
    TOKEN_ENV,
    USER_ENV,
    connect_options,
    name_token,
)
from agent_process.storage import LocalFiles, open_storage
from bundle.plan import AgentPlan, ClusterStoragePlan, ModelPlan
from goondan.urls import redact_url


def test_names_stand_for_themselves_or_a_digest_that_no_name_can_spell() -> None:
    assert name_token("default") == "default"
    assert name_token("chat-42_x") == "chat-42_x"
    dotted = name_token("my.agent")
    assert dotted.startswith("=")
    assert "." not in dotted
    assert name_token("a b") != name_token("a-b")
    assert name_token("a b").startswith("=")
    assert name_token("x" * 97).startswith("=")  # too long to name itself


def test_a_password_in_the_url_is_never_shown() -> None:
    assert (
        redact_url("nats://bob:s3cret@h:4222,nats://h2:4222")
        == "nats://bob:***@h:4222,nats://h2:4222"
    )
    assert redact_url("nats://tok3n@h:4222") == "nats://***@h:4222"


def test_credentials_come_from_the_environment_and_leave_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(USER_ENV, "agent")
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    monkeypatch.setenv(TOKEN_ENV, "unused")
    options = connect_options(ClusterStoragePlan(url="nats://a:4222,nats://b:4222", cluster="c"))
    assert options["servers"] == ["nats://a:4222", "nats://b:4222"]
    assert (options["user"], options["password"]) == ("agent", "s3cret")
    # Gone from the environment: no program a tool starts inherits them.
    assert not {USER_ENV, PASSWORD_ENV, TOKEN_ENV} & set(os.environ)


def test_a_plan_without_cluster_storage_keeps_local_files(tmp_path: Path) -> None:
    plan = AgentPlan(
        swarm_name="s",
        entry_agent="a",
        agents=["a"],
        agent_name="a",
        model=ModelPlan(name="m", provider="scripted", model="rules"),
        state_dir=str(tmp_path),
    )
    storage = open_storage(plan)
    assert isinstance(storage, LocalFiles)
    assert storage.records is None
    assert "s3cret" not in repr(ClusterStoragePlan(url="nats://bob:s3cret@h:4222", cluster="c"))
