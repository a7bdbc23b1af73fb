"""github connector: X-GitHub-Event mapping and X-Hub-Signature-256, over real sockets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest

from tests.support.http_connector import HttpConnectorContext, hmac_hex, serving
from tools_base.connectors import github

SECRET = "gh-hook-secret-0a9b8c"
EVENTS = {"github_push", "github_pull_request", "github_issue", "github_issue_comment"}
REPO = {"full_name": "octo/hello"}
SENDER = {"login": "mona"}


def context(secret: str | None = SECRET, state_dir: Path | None = None) -> HttpConnectorContext:
    return HttpConnectorContext(
        "GITHUB_WEBHOOK",
        secrets={"signingSecret": secret} if secret else {},
        declared=EVENTS,
        state_dir=state_dir,
    )


async def deliver(
    client: httpx2.AsyncClient,
    event: str,
    payload: dict[str, Any],
    *,
    delivery: str = "d-1",
    secret: str = SECRET,
) -> httpx2.Response:
    body = json.dumps(payload).encode()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + hmac_hex(secret, body),
        "Content-Type": "application/json",
    }
    return await client.post("/", content=body, headers=headers)


CASES = [
    (
        "push",
        {
            "ref": "refs/heads/main",
            "compare": "https://github.com/octo/hello/compare/a...b",
            "head_commit": {"message": "Fix the build"},
        },
        "github_push",
        "push to refs/heads/main by mona: Fix the build\nhttps://github.com/octo/hello/compare/a...b",
        {"ref": "refs/heads/main", "url": "https://github.com/octo/hello/compare/a...b"},
    ),
    (
        "pull_request",
        {
            "action": "opened",
            "pull_request": {"number": 7, "title": "Add docs", "html_url": "https://gh/pr/7"},
        },
        "github_pull_request",
        "pull request #7 opened by mona: Add docs\nhttps://gh/pr/7",
        {"action": "opened", "number": "7", "url": "https://gh/pr/7"},
    ),
    (
        "issues",
        {"action": "closed", "issue": {"number": 3, "title": "Crash on start"}},
        "github_issue",
        "issue #3 closed by mona: Crash on start",
        {"action": "closed", "number": "3"},
    ),
    (
        "issue_comment",
        {
            "action": "created",
            "issue": {"number": 3},
            "comment": {"body": "Still happens", "html_url": "https://gh/c/1"},
        },
        "github_issue_comment",
        "comment on #3 by mona: Still happens\nhttps://gh/c/1",
        {"action": "created", "number": "3", "url": "https://gh/c/1"},
    ),
]


@pytest.mark.parametrize(("kind", "payload", "name", "text", "properties"), CASES)
async def test_each_github_event_maps_to_its_swarm_event(
    kind: str, payload: dict[str, Any], name: str, text: str, properties: dict[str, str]
) -> None:
    ctx = context()
    async with serving(github.run, ctx) as client:
        response = await deliver(client, kind, {**payload, "repository": REPO, "sender": SENDER})
        assert (response.status_code, response.json()) == (202, {"ok": True})
    event = await ctx.next_event()
    assert event.name == name
    assert event.instance_key == "github:octo/hello"
    assert event.text() == text
    assert event.properties == {
        "event": kind,
        "repo": "octo/hello",
        "sender": "mona",
        "delivery": "d-1",
        **properties,
    }


async def test_ping_and_unmapped_events_are_204_and_emit_nothing() -> None:
    ctx = context()
    async with serving(github.run, ctx) as client:
        for kind in ("ping", "star", "workflow_run", ""):
            response = await deliver(client, kind, {"zen": "Keep it simple.", "repository": REPO})
            assert (response.status_code, response.content) == (204, b"")
        issue = {"action": "opened", "issue": {"number": 1, "title": "t"}, "repository": REPO}
        assert (await deliver(client, "issues", issue, delivery="d-2")).status_code == 202
    assert (await ctx.next_event()).name == "github_issue"


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "sha256=" + "0" * 64,
        hmac_hex(SECRET, b'{"ref": "refs/heads/main"}'),  # no sha256= prefix
        "sha1=" + hmac_hex(SECRET, b'{"ref": "refs/heads/main"}'),
        "sha256=" + hmac_hex("wrong", b'{"ref": "refs/heads/main"}'),
    ],
)
async def test_missing_or_wrong_signatures_are_401(signature: str | None) -> None:
    ctx = context()
    body = b'{"ref": "refs/heads/main"}'
    headers = {"X-GitHub-Event": "push"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    async with serving(github.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 401
        ok = await deliver(client, "push", {"ref": "refs/heads/dev", "repository": REPO})
        assert ok.status_code == 202
    assert (await ctx.next_event()).properties["ref"] == "refs/heads/dev"
    assert SECRET not in ctx.log.text()


async def test_a_form_encoded_delivery_is_read_from_its_payload_field() -> None:
    ctx = context()
    payload = {"action": "reopened", "issue": {"number": 9, "title": "Again"}, "repository": REPO}
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "form-1",
        "X-Hub-Signature-256": "sha256=" + hmac_hex(SECRET, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    curl = json.dumps({"ref": "refs/heads/curl", "repository": REPO}).encode()
    curl_headers = {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": "curl-1",
        "X-Hub-Signature-256": "sha256=" + hmac_hex(SECRET, curl),
        "Content-Type": "application/x-www-form-urlencoded",  # what curl -d says
    }
    async with serving(github.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 202
        assert (await client.post("/", content=curl, headers=curl_headers)).status_code == 202
        no_payload = urlencode({"other": "{}"}).encode()
        headers["X-GitHub-Delivery"] = "form-2"
        headers["X-Hub-Signature-256"] = "sha256=" + hmac_hex(SECRET, no_payload)
        assert (await client.post("/", content=no_payload, headers=headers)).status_code == 400
    assert (await ctx.next_event()).text() == "issue #9 reopened: Again"  # no sender given
    assert (await ctx.next_event()).properties["ref"] == "refs/heads/curl"


async def test_a_redelivery_is_emitted_once_and_no_repo_keys_by_event() -> None:
    ctx = context(secret=None)
    async with serving(github.run, ctx) as client:
        push = {"ref": "refs/heads/main", "repository": REPO}
        assert (await deliver(client, "push", push, delivery="same")).status_code == 202
        assert (await deliver(client, "push", push, delivery="same")).status_code == 204
        bare = {"ref": "refs/heads/x"}
        assert (await deliver(client, "push", bare, delivery="other")).status_code == 202
        bad = await client.post("/", content=b"[]", headers={"X-GitHub-Event": "push"})
        assert bad.status_code == 400
    first, second = await ctx.next_event(), await ctx.next_event()
    assert first.instance_key == "github:octo/hello"
    assert second.instance_key == "github:push"


PUSH = {"ref": "refs/heads/main", "after": "9f8e7d", "repository": REPO, "sender": SENDER}


async def test_a_delivery_replayed_with_a_new_id_is_not_a_second_event() -> None:
    ctx = context()
    async with serving(github.run, ctx) as client:
        assert (await deliver(client, "push", PUSH, delivery="guid-1")).status_code == 202
        for replay in ("guid-1", "guid-2", "guid-3", "guid-1"):
            response = await deliver(client, "push", PUSH, delivery=replay)
            assert (response.status_code, response.content) == (204, b"")
        other = {**PUSH, "after": "0a1b2c"}
        assert (await deliver(client, "push", other, delivery="guid-9")).status_code == 202
    # in order: had a copy been emitted, it would come before the second push
    first, second = await ctx.next_event(), await ctx.next_event()
    assert (first.properties["delivery"], second.properties["delivery"]) == ("guid-1", "guid-9")


async def test_a_signed_delivery_without_its_id_is_refused() -> None:
    ctx = context()
    body = json.dumps(PUSH).encode()
    headers = {
        "X-GitHub-Event": "push",
        "X-Hub-Signature-256": "sha256=" + hmac_hex(SECRET, body),
    }
    async with serving(github.run, ctx) as client:
        assert (await client.post("/", content=body, headers=headers)).status_code == 400
        blank = {**headers, "X-GitHub-Delivery": ""}
        assert (await client.post("/", content=body, headers=blank)).status_code == 400
        # refused, so not remembered: the same body with its id is taken
        assert (await deliver(client, "push", PUSH, delivery="guid-1")).status_code == 202
        assert (await client.post("/", content=body, headers=headers)).status_code == 400
    assert (await ctx.next_event()).properties["delivery"] == "guid-1"
    assert ctx.events.empty()


async def test_a_redelivery_is_refused_by_the_next_run_of_the_connector(tmp_path: Path) -> None:
    first = context(state_dir=tmp_path)
    async with serving(github.run, first) as client:
        assert (await deliver(client, "push", PUSH, delivery="guid-1")).status_code == 202
    assert (await first.next_event()).name == "github_push"
    second = context(state_dir=tmp_path)
    async with serving(github.run, second) as client:
        assert (await deliver(client, "push", PUSH, delivery="guid-1")).status_code == 204
        assert (await deliver(client, "push", PUSH, delivery="guid-2")).status_code == 204
        other = {**PUSH, "after": "0a1b2c"}
        assert (await deliver(client, "push", other, delivery="guid-3")).status_code == 202
    assert (await second.next_event()).properties["delivery"] == "guid-3"
