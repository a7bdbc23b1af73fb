"""A request the leader accepted is finished by its standby when the leader dies under it.

A real NATS server, a leader, a standby and node ``node-b`` (running ``back``), each its own
process. A request to ``back`` whose Turn takes a few seconds is accepted by the leader,
which is then killed outright (SIGKILL of its whole process group). The standby leads, finds
the request in the cluster's journal, routes it again with its request id, and records the
answer in the journal, where the next caller asking for it finds it: by its id
(``GET /v1/requests/{id}`` of the new leader) or by its idempotency key.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest

from orchestrator.cluster.request_journal import JournaledRequest, RequestJournal
from orchestrator.cluster.settings import ClusterSettings
from orchestrator.http.client import DaemonApi, NoAnswer
from tests.support.cluster import EXAMPLE, Cluster, running_cluster, start_standby

pytestmark = pytest.mark.timeout(180)
PAUSE = (
    '      - when: { input: "^pause" }\n        call: { tool: wait__wait, args: { seconds: 4 } }\n'
)
SLOW_RULE = '      - when: { input: "^slow" }\n'


def bundle_with_pause(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text()
    assert SLOW_RULE in text
    path = tmp_path / "bundle" / "goondan.yaml"
    path.parent.mkdir()
    path.write_text(text.replace(SLOW_RULE, PAUSE + SLOW_RULE, 1))
    return path


def journaled(cluster: Cluster, request_id: str) -> JournaledRequest | None:
    """The request as the cluster's journal holds it, read over a connection of our own."""
    import nats

    async def read() -> JournaledRequest | None:
        nc = await nats.connect(
            cluster.nats.url, user="leader", password=cluster.passwords["leader"]
        )
        try:
            settings = ClusterSettings(url=cluster.nats.url, name="relay")
            return await (await RequestJournal.open(nc, settings)).get(request_id)
        finally:
            await nc.close()

    return asyncio.run(read())


def test_a_request_the_dead_leader_accepted_is_answered_by_the_standby(tmp_path: Path) -> None:
    with running_cluster(tmp_path, bundle_with_pause(tmp_path)) as cluster:
        leader = cluster.start_leader("--log-level", "debug")
        cluster.join("node-b")
        standby = start_standby(cluster)

        def ask() -> None:
            with contextlib.suppress(NoAnswer):  # its leader dies under it
                cluster.request("back", "pause please")

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        started = leader.log.wait_for("request journaled", 60, agent="back")
        request_id = started["request_id"]
        assert journaled(cluster, request_id) is not None  # before its Turn ran

        leader.stop()  # kill -9, mid-Turn

        standby.log.wait_for("the cluster's leader is gone; this standby leads now", 60)
        again = standby.log.wait_for(
            "finishing a request the previous leader accepted", 60, request_id=request_id
        )
        assert again["agent"] == "back"
        answered = standby.log.wait_for(
            "request of the previous leader answered", 60, request_id=request_id
        )
        assert answered["status"] == "ok"
        found = journaled(cluster, request_id)
        assert found is not None
        assert found.state == "done"
        assert found.answer is not None
        assert found.answer["output"] == "back waited"
        asking.join(30)

        # The caller whose connection died re-attaches by id at the new leader.
        new_leader = DaemonApi(cluster.root / "standby" / ".goondan", timeout=60)
        code, body = new_leader.call("GET", f"/v1/requests/{request_id}?wait=30")
        assert code == 200, body
        assert body["state"] == "done"
        assert (body["answer"]["output"], body["answer"]["requestId"]) == (
            "back waited",
            request_id,
        )
        code, body = new_leader.call("GET", "/v1/requests/req_" + "0" * 32)
        assert code == 404, body  # an id no leader accepted
        assert body["error"]["code"] == "REQUEST_NOT_FOUND"
