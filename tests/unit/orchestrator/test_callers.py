"""Who a request acts as, in the records it leaves: ``decidedBy`` and how it is worded."""

from __future__ import annotations

import types
from typing import Any

import pytest
from msgspec import UNSET

from orchestrator import callers
from orchestrator.approvals import approval_line, describe_decider
from orchestrator.callers import ApiToken, Caller
from tests.support.fake_swarm import approval


def test_an_api_token_is_named_and_never_shown() -> None:
    assert ApiToken.named(None) is None
    bare = ApiToken.named("s3cret")
    assert bare == ApiToken("api-token", "s3cret")
    assert ApiToken.named(bare) is bare
    assert "s3cret" not in repr(ApiToken("GOONDAN_API_TOKEN", "s3cret"))


def test_who_decided_in_words() -> None:
    unix_caller = Caller("unix", pid=4242, uid=1000, gid=1000, user="alice")
    assert unix_caller.to_json() == {
        "via": "unix",
        "pid": 4242,
        "uid": 1000,
        "gid": 1000,
        "user": "alice",
    }
    assert unix_caller.describe() == "uid 1000 (alice) pid 4242 on api.sock"
    token = Caller("tcp", address="10.0.0.7:50000", token="GOONDAN_API_TOKEN")
    assert token.to_json() == {
        "via": "tcp",
        "address": "10.0.0.7:50000",
        "token": "GOONDAN_API_TOKEN",
    }
    assert token.describe() == "token GOONDAN_API_TOKEN from 10.0.0.7:50000"
    anonymous = Caller("tcp", address="127.0.0.1:5", uid=1000, pid=9)
    assert anonymous.describe() == "anonymous uid 1000 pid 9 from 127.0.0.1:5"
    assert describe_decider({}) == "unknown"


def test_the_approvals_line_names_who_decided() -> None:
    row = approval(
        "apr_1f2e3d4c5b6a7980",
        "approved",
        agentName="worker",
        instanceKey="default",
        decidedAt="2026-01-31T12:00:00.000Z",
        decidedBy={"via": "unix", "pid": 4242, "uid": 1000, "gid": 1000, "user": "alice"},
    )
    assert approval_line(row) == (
        'apr_1f2e3d4c5b6a7980  worker@default  bash__exec  {"command": "ls"}  approved by '
        "uid 1000 (alice) pid 4242 on api.sock at 2026-01-31T12:00:00.000Z"
    )
    row.decided_by = UNSET  # decided before decisions named their maker
    assert approval_line(row).endswith('{"command": "ls"}  approved at 2026-01-31T12:00:00.000Z')


def test_a_uids_name_is_asked_of_the_password_database_once_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []
    names = {4242: "ada"}

    def getpwuid(uid: int) -> Any:
        asked.append(uid)
        return types.SimpleNamespace(pw_name=names[uid])

    clock = [1000.0]
    monkeypatch.setattr(callers.pwd, "getpwuid", getpwuid)
    monkeypatch.setattr(callers.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(callers, "_user_names", {})
    assert [callers.user_name(4242) for _ in range(3)] == ["ada"] * 3
    assert asked == [4242]
    names[4242] = "grace"  # renamed: seen once the minute is over
    clock[0] += callers.USER_NAME_SECONDS + 1
    assert callers.user_name(4242) == "grace"
    assert asked == [4242, 4242]
    assert callers.user_name(None) is None
