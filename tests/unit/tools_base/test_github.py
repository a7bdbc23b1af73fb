"""github: commenting on and labelling issues and pull requests against a local GitHub API.

The server answers in GitHub's REST shapes (comment objects, label lists, ``{"message",
"documentation_url"}`` errors, rate-limit headers); the token may appear only in the
``Authorization`` header it receives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.support.chat_server import ChatApiServer, serve
from tests.support.wire_server import Reply
from tools_base import ToolContext, ToolError, ToolHandler
from tools_base.tools.github import configure

TOKEN = "ghp_FAKEtokenForTests0123456789abcdefXYZ"
COMMENT = {
    "id": 555,
    "html_url": "https://github.com/octo/hello/issues/7#issuecomment-555",
    "body": "thanks",
}


@pytest.fixture
def server() -> Iterator[ChatApiServer]:
    yield from serve()


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GH_TOKEN", "GITHUB_API_URL", "GITHUB_ALLOWED_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)


def tool(server: ChatApiServer) -> dict[str, ToolHandler]:
    return configure({"apiBaseUrl": server.url + "/api/v3", "allowedHosts": [server.host_entry]})


def from_issue(ctx: ToolContext) -> ToolContext:
    """``ctx`` of a Turn a github Connection started for issue #7 of octo/hello."""
    return dataclasses.replace(
        ctx,
        inbound={
            "connector_name": "github",
            "repo": "octo/hello",
            "number": "7",
            "event": "issues",
        },
    )


def fail(handlers: dict[str, ToolHandler], name: str, ctx: ToolContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        handlers[name](ctx, args)
    return info.value


def test_comment_goes_to_the_issue_that_started_the_turn(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/7/comments"] = Reply(status=201, body=COMMENT)
    result = tool(server)["comment"](from_issue(ctx), {"body": "thanks"})
    assert result == {
        "ok": True,
        "repo": "octo/hello",
        "number": 7,
        "commentId": 555,
        "url": COMMENT["html_url"],
    }
    [request] = server.requests
    assert request.method == "POST"
    assert request.body == {"body": "thanks"}
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["accept"] == "application/vnd.github+json"
    assert request.headers["x-github-api-version"] == "2022-11-28"


def test_comment_elsewhere_names_repo_and_number(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes["/api/v3/repos/other/repo.js/issues/12/comments"] = Reply(
        status=201, body=COMMENT
    )
    args = {"body": "x", "repo": "other/repo.js", "number": 12}
    assert tool(server)["comment"](ctx, args)["number"] == 12
    # Without them, and not in a github Turn, the model must name them.
    error = fail(tool(server), "comment", ctx, body="x")
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert "repo" in error.message
    error = fail(tool(server), "comment", ctx, body="x", repo="other/repo.js")
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert "number" in error.message


def test_update_comment_patches_it(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/comments/555"] = Reply(body=COMMENT)
    result = tool(server)["update_comment"](from_issue(ctx), {"commentId": 555, "body": "v2"})
    assert result["commentId"] == 555
    [request] = server.requests
    assert (request.method, request.body) == ("PATCH", {"body": "v2"})


def test_add_labels_returns_the_issues_labels(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/7/labels"] = Reply(
        body=[{"id": 1, "name": "bug"}, {"id": 2, "name": "triage"}]
    )
    result = tool(server)["add_labels"](from_issue(ctx), {"labels": ["triage", " triage "]})
    assert result["labels"] == ["bug", "triage"]
    assert server.requests[0].body == {"labels": ["triage"]}


def test_a_non_2xx_answer_is_a_structured_error_without_the_token(
    server: ChatApiServer, ctx: ToolContext
) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/7/comments"] = Reply(
        status=404,
        body={"message": f"Not Found (token {TOKEN})", "documentation_url": "https://docs"},
    )
    with structlog.testing.capture_logs() as logs:
        error = fail(tool(server), "comment", from_issue(ctx), body="x")
    assert error.code == "E_GITHUB_API_ERROR"
    assert error.message.startswith("[github] comment failed (HTTP 404): Not Found")
    assert TOKEN not in error.message
    assert error.__cause__ is None
    assert error.__context__ is None
    assert TOKEN not in repr(logs)


def test_a_spent_rate_limit_says_when_to_retry(server: ChatApiServer, ctx: ToolContext) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/7/labels"] = Reply(
        status=403,
        body={"message": "API rate limit exceeded"},
        headers={"x-ratelimit-remaining": "0", "retry-after": "30"},
    )
    error = fail(tool(server), "add_labels", from_issue(ctx), labels=["bug"])
    assert error.code == "E_GITHUB_RATE_LIMITED"
    assert "retry in 30 s" in error.message


def test_no_token_is_refused_before_any_request(
    server: ChatApiServer, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    error = fail(tool(server), "comment", from_issue(ctx), body="x")
    assert error.code == "E_CHAT_TOKEN_MISSING"
    assert "GITHUB_TOKEN" in error.message
    assert not server.requests


@pytest.mark.parametrize("repo", ["octo", "octo/hello/extra", "../etc", "octo/..", "a b/c"])
def test_a_bad_repo_is_refused(server: ChatApiServer, ctx: ToolContext, repo: str) -> None:
    error = fail(tool(server), "comment", ctx, body="x", repo=repo, number=1)
    assert error.code == "E_TOOL_INVALID_ARGS"
    assert not server.requests


def test_enterprise_base_url_from_the_environment(
    server: ChatApiServer, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/api/v3/repos/octo/hello/issues/7/comments"] = Reply(status=201, body=COMMENT)
    monkeypatch.setenv("GITHUB_API_URL", server.url + "/api/v3")
    assert configure({})["comment"](from_issue(ctx), {"body": "x"})["ok"] is True


def test_a_private_address_is_refused(server: ChatApiServer, ctx: ToolContext) -> None:
    handlers = configure({"apiBaseUrl": f"https://127.0.0.1:{server.port}"})
    error = fail(handlers, "comment", from_issue(ctx), body="x")
    assert error.code == "E_HTTP_FORBIDDEN_ADDRESS"
    assert not server.requests
