"""The leader's count of conversations its agents keep in JetStream: the keys it watches,
named as the agents name them."""

from __future__ import annotations

from agent_process.jetstream_link import StoreNames
from agent_process.jetstream_link import name_token as agents_token
from orchestrator.cluster.settings import cluster_token
from orchestrator.cluster.stored_instances import StoredInstances, name_token, state_bucket


def test_keys_and_bucket_are_named_as_the_agents_name_them() -> None:
    for name in ("keeper", "team-7_b", "dm:alice", "über", "a.b", ""):
        assert name_token(name) == agents_token(name)
    names = StoreNames(cluster_token("my swarm"), "keeper")
    assert state_bucket("my swarm") == names.bucket
    assert names.key("default", "base").endswith(".base")


def test_each_base_key_is_an_instance_until_it_is_deleted() -> None:
    stored = StoredInstances("memory")
    odd = name_token("dm:alice")
    for key in ("keeper.default.base", f"keeper.{odd}.base", "front.default.base"):
        stored.note(key, "PUT")
    stored.note("keeper.default.base", None)  # a fold replaces the base: still one
    stored.note("keeper.other.snap.x1", None)  # a snapshot, a record: not instances
    stored.note("keeper.other.r.metadata.json", None)
    assert stored.of("keeper") == sorted(["default", odd])
    assert stored.of("front") == ["default"]
    assert stored.of("nobody") == []
    stored.note("keeper.default.base", "DEL")
    stored.note(f"keeper.{odd}.base", "PURGE")
    assert stored.of("keeper") == []
