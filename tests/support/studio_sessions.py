"""Requests to the studio as a program sends them (``urllib``: any header it likes), and the
parked tool calls they try to decide."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from tests.support.daemon import run_cli
from tests.support.studio import StudioProcess, wait_for_approval

TOKEN_META = re.compile(r'<meta name="goondan-csrf" content="([^"]+)">')


def park(directory: Path, command: str) -> str:
    """Ask the worker to run ``command`` (it parks for approval); the approval's id."""
    sent = run_cli("send", "worker", f"run {command}", "--no-wait", cwd=directory)
    assert sent.returncode == 0, sent.stderr
    return wait_for_approval(directory)


def approval(directory: Path, approval_id: str) -> dict[str, Any]:
    """The approval's row, as the CLI lists it."""
    listed = run_cli("approvals", "--all", "--json", cwd=directory)
    assert listed.returncode == 0, listed.stderr
    rows = {row["approvalId"]: row for row in json.loads(listed.stdout)}
    found: dict[str, Any] = rows[approval_id]
    return found


def port_of(studio: StudioProcess) -> int:
    return int(studio.url.rstrip("/").rpartition(":")[2])


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """``GET url``: status, headers (lower-case names; ``set-cookie`` joined) and body."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, head, raw = answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as refused:
        status, head, raw = refused.code, refused.headers, refused.read()
    found = {k.lower(): v for k, v in head.items()}
    found["set-cookie"] = "\n".join(head.get_all("set-cookie") or [])
    return status, found, raw.decode()


def open_session(studio: StudioProcess, link: str | None = None) -> tuple[str, str, str]:
    """Open the studio's printed link as a browser does: ``(cookie name, its value, the
    token the page embeds)``; checks the cookie's attributes on the way."""
    status, headers, page = fetch(link or studio.link)
    assert status == 200, page
    cookie = SimpleCookie()
    cookie.load(headers["set-cookie"])
    [(name, morsel)] = cookie.items()
    assert name == f"goondan-studio-{port_of(studio)}"
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "strict"
    assert morsel["path"] == "/"
    assert "no-store" in headers["cache-control"]
    found = TOKEN_META.search(page)
    assert found is not None, page
    return name, morsel.value, found.group(1)


def post(
    studio: StudioProcess,
    path: str,
    body: object,
    *,
    origin: str | None = "own",
    token: str | None = None,
    cookie: tuple[str, str] | None = None,
    content_type: str = "application/json",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """``method path`` to the studio with ``body``; ``origin`` ``"own"`` is the studio's;
    ``cookie`` a ``(name, value)``."""
    url = studio.url.rstrip("/")
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method=method, headers=headers or {}
    )
    request.add_header("Content-Type", content_type)
    if origin is not None:
        request.add_header("Origin", url if origin == "own" else origin)
    if token is not None:
        request.add_header("X-Goondan-Csrf", token)
    if cookie is not None:
        request.add_header("Cookie", f"{cookie[0]}={cookie[1]}")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as refused:
        raw = refused.read()
        return refused.code, json.loads(raw) if raw.startswith(b"{") else {}


def session_facts(studio: StudioProcess, cookie: tuple[str, str] | None = None) -> dict[str, Any]:
    """``GET /api/session``, with ``cookie`` when given."""
    headers = {"Cookie": f"{cookie[0]}={cookie[1]}"} if cookie is not None else {}
    status, _, body = fetch(studio.url + "api/session", headers)
    assert status == 200, body
    facts: dict[str, Any] = json.loads(body)
    return facts
