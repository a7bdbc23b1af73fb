"""Bad bodies against a real daemon on loopback TCP: each is a 400 JSON error naming its field,
answered before anything is queued, and no agent is disturbed (no crash, no restart).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from goondan.defaults import MAX_REQUEST_TIMEOUT_MS
from tests.support.daemon import Daemon
from tests.support.listening import agent_row, instance_keys, listening

pytestmark = pytest.mark.timeout(120)

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def test_swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    """The test swarm listening on loopback, its agent beta running with one conversation."""
    daemon, api = listening(Path(tmp_path_factory.mktemp("bodies")))
    try:
        with httpx2.Client(base_url=api, timeout=30) as http:
            warm = http.post(
                "/v1/agents/beta/requests", json={"input": "hi", "instanceKey": "warm"}
            )
            assert warm.status_code == 200, warm.text
        yield daemon, api
    finally:
        daemon.stop()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


CHAT = "/v1/chat/completions"
ASK = "/v1/agents/beta/requests"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (ASK, '{"input": "hi", "instanceKey": "bad", "x": ' + nested(100_000) + "}", None),
        (ASK, '{"input": "hi", "instanceKey": ' + nested(70) + "}", "instanceKey" + "[0]" * 63),
        (CHAT, '{"model": ["a"], "messages": [{"role": "user", "content": "hi"}]}', "model"),
        (ASK, '{"input": "\\ud800x", "instanceKey": "bad"}', "input"),
        ("/v1/agents/beta/sends", '{"input": "\\udfff", "instanceKey": "bad"}', "input"),
        (ASK, '{"input": "hi", "instanceKey": "bad\\udc00"}', "instanceKey"),
        (ASK, '{"input": "hi", "instanceKey": "bad", "timeoutMs": 1e20}', "timeoutMs"),
        (
            ASK,
            '{"input": "hi", "instanceKey": "bad", "timeoutMs": 100000000000000000000}',
            "timeoutMs",
        ),
        (
            ASK,
            f'{{"input": "hi", "instanceKey": "bad", "timeoutMs": {MAX_REQUEST_TIMEOUT_MS + 1}}}',
            "timeoutMs",
        ),
        (ASK, '{"input": "hi", "instanceKey": "bad", "timeoutMs": NaN}', "timeoutMs"),
        (ASK, '{"input": "hi", "instancekey": "bad"}', "instancekey"),
        (ASK, '{"instanceKey": "bad"}', "input"),
        (ASK, '{"input": "hi", "instanceKey": "bad", "stream": "yes"}', "stream"),
        (
            CHAT,
            '{"model": "beta", "user": "bad", "messages": [{"role": "user", "content": "\\ud800"}]}',
            "messages[0].content",
        ),
        (
            CHAT,
            '{"model": "beta", "user": "bad", "messages": '
            '[{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
            "messages[0].content[0].text",
        ),
        (CHAT, '{"model": "beta", "user": "bad", "messages": "hi"}', "messages"),
        ("/v1/requests/anything/cancel", '{"reason": "\\ud800"}', "reason"),
    ],
)
def test_a_bad_body_is_a_400_naming_its_field_and_disturbs_no_agent(
    test_swarm: tuple[Daemon, str], path: str, body: str, field: str | None
) -> None:
    _, api = test_swarm
    with httpx2.Client(base_url=api, timeout=30) as http:
        before = beta_row(http)
        answer = http.post(path, content=body.encode(), headers=JSON)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "BAD_REQUEST"
        named = error.get("param" if path == CHAT else "field")
        assert named == field, error
        if field is None:
            assert f"nests deeper than {64} levels" in error["message"]
        else:
            assert field.partition("[")[0] in error["message"]
        after = beta_row(http)
        assert (after["pid"], after["restarts"], after["crashes"]) == (
            before["pid"],
            before["restarts"],
            before["crashes"],
        )
        assert instance_keys(http, "beta") == ["warm"]  # nothing was queued


def beta_row(http: httpx2.Client) -> dict[str, object]:
    row = agent_row(http, "beta")
    assert row["status"] in ("idle", "processing"), row
    return row


def test_a_week_is_the_longest_timeout_a_request_may_ask(test_swarm: tuple[Daemon, str]) -> None:
    _, api = test_swarm
    with httpx2.Client(base_url=api, timeout=30) as http:
        longest = {"input": "hi", "instanceKey": "warm", "timeoutMs": MAX_REQUEST_TIMEOUT_MS}
        answer = http.post(ASK, json=longest)
        assert (answer.status_code, answer.json()["output"]) == (200, "beta got: hi")
