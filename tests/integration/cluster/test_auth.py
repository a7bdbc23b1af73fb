"""NATS that needs credentials, and a ``leader`` key nobody else can take or stop.

A real ``nats-server``, real leader and node processes. The hostile writes come from
``stranger``: another user of the cluster's NATS account, with every permission a leader has
but not the members' key (the case the signatures exist for); the example's own
configuration keeps nodes off the ``leader`` key besides.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster, Member, NatsServer, running_cluster, start_standby

pytestmark = pytest.mark.timeout(150)


def stranger_writes(
    cluster: Cluster,
    records: list[bytes | None],
    *,
    user: str = "stranger",
    repeat_for: float = 0.0,
) -> list[str]:
    """Connect as ``user`` and write each of ``records`` to the ``leader`` key (``None``:
    delete it), over and over for ``repeat_for`` seconds; what the server answered."""
    import nats

    async def write() -> list[str]:
        async def ignore(exc: Exception) -> None:
            return None

        client = await nats.connect(
            cluster.nats.url,
            user=user,
            password=cluster.passwords[user],
            error_cb=ignore,
            allow_reconnect=False,
        )
        answers: list[str] = []
        try:
            kv = await client.jetstream(timeout=2).key_value("goondan_relay")
            end = time.monotonic() + repeat_for
            while True:
                for record in records:
                    try:
                        if record is None:
                            await kv.delete("leader")
                        else:
                            await kv.put("leader", record)
                        answers.append("written")
                    except Exception as exc:
                        answers.append(type(exc).__name__)
                if time.monotonic() >= end:
                    return answers
                await asyncio.sleep(0.2)
        finally:
            await client.close()

    return asyncio.run(write())


def leader_record(cluster: Cluster, user: str = "stranger") -> dict[str, Any]:
    """The ``leader`` key's record as it is now, read as ``user`` (``{}`` while deleted)."""
    import nats
    from nats.js.errors import KeyNotFoundError

    async def read() -> dict[str, Any]:
        client = await nats.connect(cluster.nats.url, user=user, password=cluster.passwords[user])
        try:
            bucket = await client.jetstream().key_value("goondan_relay")
            try:
                entry = await bucket.get("leader")
            except KeyNotFoundError:  # deleted (by the stranger) and not yet written back
                return {}
            value: dict[str, Any] = json.loads(entry.value or b"{}")
            return value
        finally:
            await client.close()

    return asyncio.run(read())


def wait_leader_record(cluster: Cluster, incarnation: str, deadline: float = 30) -> None:
    """Until the ``leader`` key holds ``incarnation``'s record again (the leader writes it
    back over the stranger's last write at its next heartbeat): a bounded poll of the key."""
    end = time.monotonic() + deadline
    while (record := leader_record(cluster)).get("incarnation") != incarnation:
        assert time.monotonic() < end, f"the leader key still holds {record}"
        time.sleep(0.1)


@pytest.mark.parametrize("command", ["run", "node"])
def test_a_server_that_admits_anonymous_clients_is_refused_naming_the_fix(
    tmp_path: Path, command: str
) -> None:
    server = NatsServer(tmp_path / "nats")  # no authorization at all
    try:
        directory = tmp_path / "member"
        directory.mkdir()
        (directory / "goondan.yaml").write_text(
            (Path(__file__).parents[3] / "examples" / "cluster" / "goondan.yaml").read_text()
        )
        args = [command, "goondan.yaml", "--cluster", server.url, "--state-dir", "state"]
        if command == "node":
            args += ["--name", "node-a"]
        # Credentials on our side do not help: the server lets anyone else in too.
        env = {
            "GOONDAN_CLUSTER_KEY": "k" * 32,
            "GOONDAN_NATS_USER": "any",
            "GOONDAN_NATS_PASSWORD": "thing",
        }
        if command == "node":  # a node waits for the leader's bucket: make it
            leader = Member(
                ["run", "goondan.yaml", "--cluster", server.url, "--insecure-nats"],
                directory,
                env,
            )
            leader.log.wait_for("orchestrator started", 60)
        member = Member(args, directory, env)
        try:
            assert member.wait(60) == 6
            said = member.log.drain().decode()
            assert "accepts clients without credentials" in said
            for fix in ("--cluster-creds", "--cluster-nkey", "GOONDAN_NATS_PASSWORD"):
                assert fix in said
            assert "--insecure-nats" in said
            assert "nats.conf" in said
            assert "thing" not in said
        finally:
            member.stop()
            if command == "node":
                leader.stop()
    finally:
        server.stop()


def test_insecure_nats_runs_a_cluster_on_an_anonymous_server_and_says_so(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, secure=False) as cluster:
        leader = cluster.start_leader()
        cluster.join("node-a")
        cluster.join("node-b")
        code, answer = cluster.request("front", "relay hello")
        assert (code, answer["output"]) == (200, "front: middle: back got hello")
        warning = leader.log.wait_for(
            "insecure NATS: the server is not checked for clients without credentials; "
            "leadership records are not signed"
        )
        assert warning["level"] == "warning"


def test_without_the_cluster_key_a_member_exits_6(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        env = {**cluster.member_env("leader"), "GOONDAN_CLUSTER_KEY": ""}
        member = Member(
            ["run", "goondan.yaml", *cluster.cluster_args()], cluster.directory("x"), env
        )
        assert member.wait(60) == 6
        assert b"GOONDAN_CLUSTER_KEY is not set" in member.log.drain()
        cluster.members.append(member)


def test_the_example_config_refuses_strangers_and_keeps_nodes_off_the_leader_key(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, example_nats_conf=True) as cluster:
        cluster.start_leader()
        cluster.join("node-a")
        cluster.join("node-b")
        code, answer = cluster.request("front", "relay hello")
        assert (code, answer["output"]) == (200, "front: middle: back got hello")
        before = leader_record(cluster, "leader")

        # A node's user may not write the leader key at all: the server drops the write.
        forged = json.dumps({"incarnation": "evil", "term": 10**9, "beat": 1}).encode()
        answers = stranger_writes(cluster, [forged, None], user="node-a")
        assert answers == ["TimeoutError", "TimeoutError"]
        cluster.nats.log.wait_for_text(
            b'Publish Violation - Subject "$KV.goondan_relay.leader"', 10
        )
        assert leader_record(cluster, "leader")["incarnation"] == before["incarnation"]


def test_a_stranger_writing_the_leader_key_neither_takes_nor_stops_the_leadership(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path) as cluster:
        leader = cluster.start_leader()
        node_a, node_b = cluster.join("node-a"), cluster.join("node-b")
        real = leader_record(cluster)
        assert real["sig"]
        assert real["term"] > 0

        # Forged: claims a far greater term, with no signature or a wrong one; a deletion.
        evil = {**real, "incarnation": "evil", "term": real["term"] + 10**6, "beat": 1}
        unsigned = {k: v for k, v in evil.items() if k != "sig"}
        records: list[bytes | None] = [
            json.dumps(evil).encode(),
            json.dumps(unsigned).encode(),
            None,
        ]
        mark = node_a.log.mark
        # For two expiries: long past the moment the leader would have stopped before.
        assert "written" in stranger_writes(cluster, records, repeat_for=2 * cluster.heartbeat * 3)

        assert leader.process.poll() is None
        code, answer = cluster.request("front", "relay after the forgery")
        assert (code, answer["output"]) == (200, "front: middle: back got after the forgery")
        assert not any(
            r.get("event") == "another process took the cluster's leadership; stopping"
            for r in leader.log.records
        )
        wait_leader_record(cluster, real["incarnation"])
        assert node_b.process.poll() is None
        node_a.log.wait_for("leadership record without a valid signature ignored", since=mark)
        node_a.log.wait_for("leader key deleted without a signed record; ignored", since=mark)
        leader.log.wait_for("leadership record without a valid signature ignored")


def test_a_replayed_record_of_a_dead_leader_does_not_unseat_its_successor(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path) as cluster:
        first = cluster.start_leader()
        node_a = cluster.join("node-a")
        cluster.join("node-b")
        old = leader_record(cluster)  # signed, valid: a record the stranger can read
        standby = start_standby(cluster)
        first.stop()  # SIGKILL: the standby leads once the key lapses
        standby.log.wait_for("the cluster's leader is gone; this standby leads now", 60)
        standby.log.wait_for("orchestrator started", 60)
        new = leader_record(cluster)
        assert new["term"] > old["term"]

        mark, node_mark = standby.log.mark, node_a.log.mark
        replay = json.dumps(old).encode()
        assert "written" in stranger_writes(cluster, [replay], repeat_for=2 * cluster.heartbeat * 3)

        assert standby.process.poll() is None
        assert not any(
            r.get("event") == "another process took the cluster's leadership; stopping"
            for r in standby.log.records
        )
        wait_leader_record(cluster, new["incarnation"])
        standby.log.wait_for("replayed leadership record overwritten", since=mark)
        node_a.log.wait_for("replayed leadership record ignored", since=node_mark)
        # The nodes still take the successor's starts: a request crosses both.
        api = cluster.root / "standby" / ".goondan"
        from orchestrator.http.client import DaemonApi

        code, answer = DaemonApi(api, timeout=60).call(
            "POST", "/v1/agents/front/requests", {"input": "relay replayed", "timeoutMs": 60_000}
        )
        assert (code, answer["output"]) == (200, "front: middle: back got replayed")
