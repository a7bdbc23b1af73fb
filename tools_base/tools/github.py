"""``github``: comment on and label the issue or pull request a Turn came from (REST API).

In a Turn a github Connection started, ``repo`` and ``number`` default to the event's (the
issue or pull request that was opened, commented on, ...), so the model passes only the text.

Exports (every one also takes ``timeoutMs``, default 15000, at most 300000):

``comment``: **body**, ``repo`` (``owner/name``), ``number`` →
    ``POST /repos/{owner}/{repo}/issues/{number}/comments`` (a pull request is an issue here)
    → ``{ok, repo, number, commentId, url}``.
``update_comment``: **commentId**, **body**, ``repo`` →
    ``PATCH /repos/{owner}/{repo}/issues/comments/{commentId}`` → ``{ok, repo, commentId, url}``.
``add_labels``: **labels** (names), ``repo``, ``number`` →
    ``POST /repos/{owner}/{repo}/issues/{number}/labels`` → ``{ok, repo, number, labels}`` (the
    issue's labels after the call).

Token: config ``token`` (a value source), else ``GITHUB_TOKEN``, else ``GH_TOKEN``; sent as
``Authorization: Bearer``, never in a result, an error or a log line. Config: ``apiBaseUrl``
(default ``GITHUB_API_URL``, else ``https://api.github.com``; GitHub Enterprise Server is
``https://<host>/api/v3``), ``allowedHosts`` (with the entries of ``GITHUB_ALLOWED_HOSTS``) and
``allowPrivateNetworks``: the address policy of the ``telegram`` tool
(:mod:`tools_base.tools._chat`).

Error codes: ``E_GITHUB_API_ERROR`` (a non-2xx answer; ``[github] <export> failed (HTTP
<status>): <message>``), ``E_GITHUB_RATE_LIMITED`` (429, or 403 with the rate limit spent;
names when to retry), ``E_CHAT_TOKEN_MISSING``, ``E_CHAT_SETTING_INVALID``,
``E_CHAT_BAD_RESPONSE``, the ``E_HTTP_*`` network codes and ``E_TOOL_INVALID_ARGS``.
"""

from __future__ import annotations

import re
import time

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._chat import (
    BAD_RESPONSE,
    SharedSettings,
    deadline_of,
    resolve_token,
)
from tools_base.tools._common import (
    invalid_arg,
    optional_number,
    optional_string,
    optional_string_list,
    require_string,
)
from tools_base.tools._rest import JsonAnswer, RestTool, inbound

TOOL = "github"
DEFAULT_API_BASE = "https://api.github.com"
TOKEN_ENV = ("GITHUB_TOKEN", "GH_TOKEN")
SHARED = SharedSettings(base_url="GITHUB_API_URL", allowed_hosts="GITHUB_ALLOWED_HOSTS")
API_ERROR = ToolCode.E_GITHUB_API_ERROR
RATE_LIMITED = ToolCode.E_GITHUB_RATE_LIMITED
API_VERSION = "2022-11-28"
MAX_BODY = 65_536
"""GitHub's limit of a comment, in characters."""
MAX_LABELS = 100

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def _repo(ctx: ToolContext, input: JsonObject) -> tuple[str, str]:
    text = optional_string(input, "repo") or inbound(ctx, TOOL, "repo")
    if text is None:
        raise invalid_arg(
            "'repo' is required, as 'owner/name' (it may be left out only in a Turn a github "
            "Connection started)"
        )
    owner, _, name = text.strip().partition("/")
    if not all(_NAME.fullmatch(part) and part not in (".", "..") for part in (owner, name)):
        raise invalid_arg(f"'repo' must look like 'owner/name', got {text!r}")
    return owner, name


def _positive(input: JsonObject, key: str) -> int:
    value = optional_number(input, key)
    if value is None or value != int(value) or value < 1:
        raise invalid_arg(f"{key!r} must be a positive integer")
    return int(value)


def _number(ctx: ToolContext, input: JsonObject) -> int:
    """``number``, else the event's issue or pull request."""
    if input.get("number") is None:
        from_event = inbound(ctx, TOOL, "number")
        if from_event is not None and from_event.isdigit() and int(from_event) > 0:
            return int(from_event)
        raise invalid_arg(
            "'number' is required (it may be left out only in a Turn a github Connection "
            "started by an issue or pull request)"
        )
    return _positive(input, "number")


def _body(input: JsonObject) -> str:
    body = require_string(input, "body")
    if len(body) > MAX_BODY:
        raise invalid_arg(f"'body' is {len(body)} characters; GitHub takes at most {MAX_BODY}")
    return body


def _rate_limit_wait(answer: JsonAnswer) -> float | None:
    """Seconds to wait when ``answer`` is a rate limit (429, or 403 with none left)."""
    headers = answer.headers
    limited = answer.status == 429 or (
        answer.status == 403
        and (headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers)
    )
    if not limited:
        return None
    after = headers.get("retry-after", "")
    if after.isdigit():
        return float(after)
    reset = headers.get("x-ratelimit-reset", "")
    if reset.isdigit():
        return max(0.0, float(reset) - time.time())
    return 60.0


class GitHubTool(RestTool, tool=TOOL, default_base=DEFAULT_API_BASE, shared=SHARED):
    """The handlers, bound to one config."""

    def authorization(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The token, as GitHub's REST API takes it (and the version asked for)."""
        token = resolve_token(TOOL, self.config.token, TOKEN_ENV)
        headers = {
            "authorization": f"Bearer {token}",
            "accept": "application/vnd.github+json",
            "x-github-api-version": API_VERSION,
        }
        return headers, (token,)

    def refusal(self, export: str, answer: JsonAnswer, text: str) -> ToolError:
        wait = _rate_limit_wait(answer)
        if wait is not None:
            return ToolError(
                f"[github] {export} rate limited (HTTP {answer.status}): {text}; retry in {wait:.0f} s",
                code=RATE_LIMITED,
                suggestion=f"Wait {wait:.0f} seconds, then call again.",
            )
        suggestion = {
            401: "GitHub refused the token; ask the operator to check GITHUB_TOKEN.",
            403: "The token may not do this here; ask the operator for its permissions.",
            404: "Check repo and number (a private repository also answers 404 without access).",
            422: "GitHub refused the content; check the arguments (label names, body).",
        }.get(answer.status, "Check the arguments; retry later if GitHub itself failed.")
        return ToolError(
            f"[github] {export} failed (HTTP {answer.status}): {text}",
            code=API_ERROR,
            suggestion=suggestion,
        )

    def _write_comment(
        self, ctx: ToolContext, input: JsonObject, export: str, method: str, path: str
    ) -> JsonObject:
        """Send the input's ``body`` as a comment to ``path``: the comment GitHub answers."""
        payload: JsonObject = {"body": _body(input)}
        answer = self.exchange(ctx, export, method, path, payload, deadline_of(input))
        if not isinstance(answer.data, dict):
            raise ToolError(
                f"[github] {export}: HTTP {answer.status} with an answer that is not JSON",
                code=BAD_RESPONSE,
            )
        return answer.data

    def comment(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``comment``: a new comment on an issue or pull request."""
        owner, name = _repo(ctx, input)
        number = _number(ctx, input)
        path = f"/repos/{owner}/{name}/issues/{number}/comments"
        data = self._write_comment(ctx, input, "comment", "POST", path)
        return {
            "ok": True,
            "repo": f"{owner}/{name}",
            "number": number,
            "commentId": data.get("id"),
            "url": data.get("html_url"),
        }

    def update_comment(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``update_comment``: replace a comment's body."""
        owner, name = _repo(ctx, input)
        comment_id = _positive(input, "commentId")
        path = f"/repos/{owner}/{name}/issues/comments/{comment_id}"
        data = self._write_comment(ctx, input, "update_comment", "PATCH", path)
        return {
            "ok": True,
            "repo": f"{owner}/{name}",
            "commentId": data.get("id", comment_id),
            "url": data.get("html_url"),
        }

    def add_labels(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``add_labels``: add labels to an issue or pull request."""
        owner, name = _repo(ctx, input)
        number = _number(ctx, input)
        labels = [
            label.strip() for label in optional_string_list(input, "labels") or [] if label.strip()
        ]
        if not labels or len(labels) > MAX_LABELS:
            raise invalid_arg(f"'labels' must name 1 to {MAX_LABELS} labels")
        payload: JsonObject = {"labels": list(dict.fromkeys(labels))}
        path = f"/repos/{owner}/{name}/issues/{number}/labels"
        answer = self.exchange(ctx, "add_labels", "POST", path, payload, deadline_of(input))
        if not isinstance(answer.data, list):
            raise ToolError(
                f"[github] add_labels: HTTP {answer.status} with an answer that is not a list",
                code=BAD_RESPONSE,
            )
        names = [item.get("name") for item in answer.data if isinstance(item, dict)]
        return {"ok": True, "repo": f"{owner}/{name}", "number": number, "labels": names}

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        return {
            "comment": self.comment,
            "update_comment": self.update_comment,
            "add_labels": self.add_labels,
        }


configure = GitHubTool.configure
handlers = configure({})
