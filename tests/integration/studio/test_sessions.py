"""Who may decide from the studio, attacked as a sandboxed program with network would: a real
daemon of the offline example with a call parked for approval, the studio as a real process,
and requests sent with ``urllib``, any header forged (``Origin``, ``Sec-Fetch-*``, cookies).

A program can read every page and route of the studio on loopback; it must still not get a
decision accepted. Only the link the studio printed (its key, which the terminal shows and no
answer does) opens a session: a cookie, and a token bound to it embedded in that one page.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.studio import StudioProcess, example_daemon
from tests.support.studio_sessions import (
    TOKEN_META,
    approval,
    fetch,
    open_session,
    park,
    port_of,
    post,
    session_facts,
)

pytestmark = pytest.mark.timeout(240)

FORGED = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
"""What a browser's fetch from the studio's own page sends, forged by a program."""
REASON = {"reason": "not from there"}


@pytest.fixture
def swarm(tmp_path: Path) -> Iterator[tuple[Path, Daemon, StudioProcess]]:
    directory = tmp_path / "swarm"
    daemon = example_daemon(directory)
    studio: StudioProcess | None = None
    try:
        studio = StudioProcess(cwd=directory)
        yield directory, daemon, studio
    finally:
        if studio is not None:
            assert studio.stop() == 0
        daemon.stop()


def code(answer: tuple[int, dict[str, object]]) -> tuple[int, object]:
    status, body = answer
    error = body.get("error")
    return status, error.get("code") if isinstance(error, dict) else None


def test_a_program_that_reads_every_page_gets_no_decision_accepted(
    swarm: tuple[Path, Daemon, StudioProcess],
) -> None:
    directory, _, studio = swarm
    approval_id = park(directory, "ls")
    approve = f"/api/approvals/{approval_id}/approve"
    # The attack of before: the token from GET /api/session, then a decision sent with every
    # header the studio's own page would send.
    facts = session_facts(studio)
    token = str(facts.get("csrfToken") or "")
    assert code(post(studio, approve, {}, token=token, headers=FORGED)) == (
        403,
        "STUDIO_SESSION_INVALID",
    )
    assert token == ""
    assert facts["canDecide"] is False
    assert "open the link the studio printed" in facts["why"]
    # Everything else a program can read: the page sets no cookie and embeds no token, and
    # no route shows the key.
    assert "key=" in studio.link
    assert "key=" not in studio.url
    status, headers, page = fetch(studio.url, FORGED)
    assert status == 200
    assert headers["set-cookie"] == ""
    assert TOKEN_META.search(page) is None
    for path in ("api/agents", "api/approvals", "api/events", "static/app.js"):
        status, _, body = fetch(studio.url + path)
        assert status == 200, path
        assert studio.link.partition("key=")[2] not in body, path
    guessed = (f"goondan-studio-{port_of(studio)}", "x." + secrets.token_urlsafe(32))
    assert code(post(studio, approve, {}, token="x", cookie=guessed, headers=FORGED)) == (
        403,
        "STUDIO_SESSION_INVALID",
    )
    # A guessed key opens nothing.
    status, headers, body = fetch(studio.url + "?key=" + secrets.token_urlsafe(32), FORGED)
    assert status == 403
    assert "STUDIO_SESSION_INVALID" in body
    assert headers["set-cookie"] == ""
    assert approval(directory, approval_id)["status"] == "pending"  # none of it acted


def test_a_decision_needs_the_cookie_and_its_own_token_from_the_page(
    swarm: tuple[Path, Daemon, StudioProcess],
) -> None:
    directory, _, studio = swarm
    approval_id = park(directory, "ls")
    reject = f"/api/approvals/{approval_id}/reject"
    approve = f"/api/approvals/{approval_id}/approve"
    name, mine, token = open_session(studio)
    _, theirs, their_token = open_session(studio)  # another browser's session
    assert (mine, token) != (theirs, their_token)
    cookie = (name, mine)
    facts = session_facts(studio, cookie)
    assert (facts["canDecide"], facts["why"]) == (True, None)
    assert "csrfToken" not in facts
    assert token not in str(facts)

    def attempt(**kwargs: object) -> tuple[int, object]:
        return code(post(studio, reject, REASON, **kwargs))  # type: ignore[arg-type]

    # One session's token with another's cookie (a replay), or either one alone.
    assert attempt(cookie=cookie, token=their_token) == (403, "CSRF_TOKEN_INVALID")
    assert attempt(cookie=(name, theirs), token=token) == (403, "CSRF_TOKEN_INVALID")
    assert attempt(cookie=cookie) == (403, "CSRF_TOKEN_INVALID")
    assert attempt(token=token) == (403, "STUDIO_SESSION_INVALID")
    assert attempt(cookie=(name, mine + "x"), token=token) == (403, "STUDIO_SESSION_INVALID")
    # Both, but not from the studio's own page.
    both = {"cookie": cookie, "token": token}
    assert attempt(**both, origin="http://attacker.example") == (403, "ORIGIN_NOT_ALLOWED")
    assert attempt(**both, origin=None) == (403, "ORIGIN_NOT_ALLOWED")
    other_port = f"http://127.0.0.1:{port_of(studio) + 1}"  # same site, another origin
    assert attempt(**both, origin=other_port) == (403, "ORIGIN_NOT_ALLOWED")
    for site in ("cross-site", "same-site", "none"):
        headers = {"Sec-Fetch-Site": site}
        assert attempt(**both, headers=headers) == (403, "ORIGIN_NOT_ALLOWED"), site
    headers = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"}  # a form
    assert attempt(**both, headers=headers) == (403, "ORIGIN_NOT_ALLOWED")
    assert attempt(**both, content_type="text/plain")[0] == 415
    # A cross-origin page's preflight gets no CORS grant, so its browser sends nothing.
    status, _ = post(studio, reject, REASON, origin="http://attacker.example", method="OPTIONS")
    assert status >= 400
    # Bodies are checked as the daemon checks them, naming the field.
    for arguments in ([], ["ls"], "ls", 7):
        status, body = post(studio, approve, {"arguments": arguments}, **both)  # type: ignore[arg-type]
        assert (status, body["error"]["field"]) == (400, "arguments"), arguments
    status, body = post(studio, reject, {"reason": "  "}, **both)  # type: ignore[arg-type]
    assert (status, body["error"]["field"]) == (400, "reason")
    status, body = post(studio, "/api/approvals/apr_0123456789abcdef/approve", {}, **both)  # type: ignore[arg-type]
    assert (status, body["error"]["code"]) == (404, "APPROVAL_NOT_FOUND")
    assert approval(directory, approval_id)["status"] == "pending"  # none of it acted

    status, body = post(studio, reject, REASON, **both, headers=FORGED)  # type: ignore[arg-type]
    assert status == 200, body
    decided = body["approval"]
    assert (decided["status"], decided["reason"]) == ("rejected", "not from there")
    # Decided by the daemon's route, which recorded the studio's own process.
    who = decided["decidedBy"]
    assert (who["via"], who["uid"], who["pid"]) == ("unix", os.getuid(), studio.process.pid)
    assert body["turn"]["status"] == "ok"
    assert code(post(studio, reject, REASON, **both)) == (409, "APPROVAL_ALREADY_DECIDED")  # type: ignore[arg-type]


def test_a_session_or_key_of_one_studio_is_no_other_studios(
    swarm: tuple[Path, Daemon, StudioProcess],
) -> None:
    directory, _, first = swarm
    approval_id = park(directory, "ls")
    approve = f"/api/approvals/{approval_id}/approve"
    _, value, token = open_session(first)
    # A second studio over the same state, as the first one restarted would be: a new key, a
    # new secret; what the first handed out opens nothing here.
    second = StudioProcess(cwd=directory)
    try:
        cookie = (f"goondan-studio-{port_of(second)}", value)
        answer = post(second, approve, {}, cookie=cookie, token=token, headers=FORGED)
        assert code(answer) == (403, "STUDIO_SESSION_INVALID")
        key = first.link.partition("?")[2]
        status, headers, _ = fetch(second.url + "?" + key)
        assert (status, headers["set-cookie"]) == (403, "")
        assert approval(directory, approval_id)["status"] == "pending"
    finally:
        second.process.terminate()
        second.process.wait(timeout=15)
        log = second.stderr()
        assert second.stop() == 0
    # The studio never wrote its key in its log, where a service's journal keeps it.
    second_key = second.link.partition("key=")[2]
    assert second_key
    assert "studio listening" in log
    assert second_key not in log


def test_a_studio_beyond_loopback_takes_no_decision(tmp_path: Path) -> None:
    directory = tmp_path / "swarm"
    daemon = example_daemon(directory)
    studio = StudioProcess("--host", "0.0.0.0", cwd=directory)
    try:
        assert "key=" not in studio.link  # no link gives the right to decide
        approval_id = park(directory, "ls")
        facts = session_facts(studio)
        assert facts["canDecide"] is False
        assert "loopback" in facts["why"]
        status, headers, _ = fetch(studio.url + "?key=anything")
        assert (status, headers["set-cookie"]) == (403, "")
        answer = post(studio, f"/api/approvals/{approval_id}/approve", {}, token="x")
        assert code(answer) == (403, "STUDIO_NOT_ON_LOOPBACK")
        assert approval(directory, approval_id)["status"] == "pending"
    finally:
        assert studio.stop() == 0
        daemon.stop()


ELSEWHERE = """async (studio) => {
  const tried = async (url, init) => {
    try {
      const answer = await fetch(url, init);
      return `${answer.type} ${answer.status}`;
    } catch (error) {
      return `failed: ${error.name}`;
    }
  };
  return [
    localStorage.getItem("goondan-csrf"),
    await tried(`${studio}/api/session`, {credentials: "include"}),
    await tried(`${studio}/api/approvals/${window.approvalId}/approve`, {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: {"Content-Type": "text/plain"}, body: "{}",
    }),
    await tried(`${studio}/api/approvals/${window.approvalId}/approve`, {
      method: "POST", credentials: "include",
      headers: {"Content-Type": "application/json", "X-Goondan-Csrf": "guess"}, body: "{}",
    }),
  ];
}"""
"""What a page on another loopback port tries, in the browser that holds a studio session:
the browser sends it the studio's cookie (cookies do not separate ports), not its token."""


def test_a_page_on_another_loopback_port_in_the_same_browser_cannot_decide(
    swarm: tuple[Path, Daemon, StudioProcess],
) -> None:
    from tests.support.pages import page_elsewhere
    from tests.support.studio import chromium

    directory, _, studio = swarm
    approval_id = park(directory, "ls")
    with page_elsewhere() as elsewhere, chromium() as browser:
        context = browser.new_context()
        own = context.new_page()
        own.goto(studio.link + "#/approvals")  # the operator's session, in this browser
        own.wait_for_url(lambda url: "key=" not in url)
        assert own.evaluate("localStorage.getItem('goondan-csrf')")
        cookies = [c for c in context.cookies() if c["name"].startswith("goondan-studio-")]
        assert [(c["httpOnly"], c["sameSite"]) for c in cookies] == [(True, "Strict")]
        other = context.new_page()
        other.goto(elsewhere)
        other.evaluate(f"window.approvalId = {approval_id!r}")
        outcomes = other.evaluate(ELSEWHERE, studio.url.rstrip("/"))
        context.close()
    # No token in its storage, the session route unreadable, the simple POST sent (with the
    # cookie) and refused, the JSON one stopped at its preflight.
    assert outcomes == [None, "failed: TypeError", "opaque 0", "failed: TypeError"], outcomes
    assert approval(directory, approval_id)["status"] == "pending"
