"""Deciding a parked tool call from the studio: checked here, carried out by the daemon.

The studio never writes an approval itself. A decision goes to the daemon's own route
(``POST /v1/approvals/{id}/approve|reject?wait=1`` on ``<state>/api.sock``), so the daemon
checks it as it checks the CLI's (an operator's process, not an agent's), records who made
it (``decidedBy``: the studio's process, its uid and user), and answers with the Turn's end.
The socket needs no token, so the page never holds one: the studio's server asks on its
behalf.

The studio has no login, so before it asks, a request must show it comes from the studio's
own page, opened from the link the studio printed, in a browser: the scheme, and why each
check is there, is :mod:`orchestrator.studio.session`'s. In order:

- the studio listens on loopback (off it, whoever reaches the address could approve: it only
  shows there);
- ``Sec-Fetch-Site: same-origin`` and ``Sec-Fetch-Mode`` ``cors`` or ``same-origin``, when
  sent (browsers send them, and no page can forge them);
- ``Origin`` names the studio itself (``http://`` + the ``Host`` it was asked at, which
  :class:`~orchestrator.studio.server` already holds to loopback names): browsers send it on
  every ``POST``, so a request without one came from no page of ours;
- ``Content-Type: application/json``, which a page elsewhere can send only after a CORS
  preflight the studio never grants;
- the session cookie (``HttpOnly``, ``SameSite=Strict``) set only when the printed link (its
  key) is opened;
- the header :data:`CSRF_HEADER` carrying the token bound to that cookie, which the page got
  embedded in the answer that set the cookie: no route serves it.

Each refusal says which check failed; the body is checked as the daemon checks it (the same
:func:`~orchestrator.approvals.decision_from_body`), naming the field that is wrong.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from goondan.errors import DaemonError, HttpCode
from orchestrator.approvals import APPROVAL_ID, BadDecision, decision_from_body
from orchestrator.http.body import BadBody, read_object
from orchestrator.http.client import DaemonApi, NoDaemon, path_segment, socket_path
from orchestrator.studio import STATIC_DIR
from orchestrator.studio.session import KEY_PARAM, TOKEN_META, StudioSession

CSRF_HEADER = "x-goondan-csrf"
"""The request header that carries the studio's CSRF token."""
DECIDE_TIMEOUT_SECONDS = 120.0
"""How long a decision waits for the daemon, the Turn it wakes included (the CLI's bound)."""

Decision = Literal["approve", "reject"]


def _refusal(status: int, code: HttpCode, message: str, field: str | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return JSONResponse({"error": error}, status_code=status)


@dataclass(frozen=True, slots=True)
class DecisionGate:
    """The checks a decision passes in the studio, and the way on to the daemon."""

    state_dir: Path
    on_loopback: bool
    """Whether the studio listens on loopback only (decisions are refused otherwise)."""
    session: StudioSession = field(default_factory=StudioSession)
    """The key of the printed link, and the cookies and tokens it leads to."""

    def link(self, url: str) -> str:
        """The address to print and open: ``url`` with the key (on loopback only)."""
        return self.session.link(url) if self.on_loopback else url

    def facts(self, request: Request) -> dict[str, Any]:
        """``GET /api/session``: whether this browser may decide, and why not (never a token)."""
        if not self.on_loopback:
            return {"canDecide": False, "why": _OFF_LOOPBACK}
        if self._token(request) is None:
            return {"canDecide": False, "why": _NO_SESSION}
        return {"canDecide": True, "why": None}

    def open_link(self, request: Request, key: str) -> Response:
        """``GET /?key=``: the page with a new session (its cookie, its token embedded) when
        ``key`` is the studio's; 403 otherwise."""
        if not self.on_loopback:
            return _refusal(403, HttpCode.STUDIO_NOT_ON_LOOPBACK, _OFF_LOOPBACK)
        if not self.session.key_matches(key):
            return _refusal(403, HttpCode.STUDIO_SESSION_INVALID, _WRONG_KEY)
        cookie, token = self.session.mint()
        page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
        charset = '<meta charset="utf-8">'
        assert charset in page, "index.html lost its charset"
        page = page.replace(charset, f'{charset}\n  <meta name="{TOKEN_META}" content="{token}">')
        answer = HTMLResponse(page, headers={"Cache-Control": "no-store"})
        answer.set_cookie(
            self.session.cookie_name(_port(request)),
            cookie,
            path="/",
            httponly=True,
            samesite="strict",
        )
        return answer

    def _token(self, request: Request) -> str | None:
        """The token of the session cookie ``request`` carries, if it is one of ours."""
        cookie = request.cookies.get(self.session.cookie_name(_port(request)))
        return self.session.token_of(cookie)

    def refused(self, request: Request) -> JSONResponse | None:
        """The answer refusing ``request`` before its body is read, or ``None``."""
        if not self.on_loopback:
            return _refusal(403, HttpCode.STUDIO_NOT_ON_LOOPBACK, _OFF_LOOPBACK)
        # request headers, from outside: read as the browser sent them
        site = request.headers.get("sec-fetch-site")
        mode = request.headers.get("sec-fetch-mode")
        if (site is not None and site != "same-origin") or (
            mode is not None and mode not in ("cors", "same-origin")
        ):
            return _refusal(
                403,
                HttpCode.ORIGIN_NOT_ALLOWED,
                f"a decision sent with Sec-Fetch-Site {site!r} and Sec-Fetch-Mode {mode!r} is "
                "refused: only the studio's own page decides",
            )
        origin = request.headers.get("origin")
        own = f"http://{request.headers.get('host', '')}".lower()
        if origin is None or origin.strip().lower().rstrip("/") != own:
            said = f"from {origin}" if origin else "without an Origin"
            return _refusal(
                403,
                HttpCode.ORIGIN_NOT_ALLOWED,
                f"a decision {said} is refused: only {own} decides",
            )
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/json":
            return _refusal(
                415, HttpCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json"
            )
        token = self._token(request)
        if token is None:
            return _refusal(403, HttpCode.STUDIO_SESSION_INVALID, _NO_SESSION)
        given = request.headers.get(CSRF_HEADER, "").encode()
        if not hmac.compare_digest(given, token.encode()):
            return _refusal(
                403,
                HttpCode.CSRF_TOKEN_INVALID,
                f"a decision must carry, in {CSRF_HEADER}, the token of this browser's session "
                "(the page holds it): open the studio's link again",
            )
        return None

    async def decide(self, request: Request, decision: Decision) -> JSONResponse:
        """Check ``request`` and carry out its decision through the daemon; its answer."""
        refusal = self.refused(request)
        if refusal is not None:
            return refusal
        approval_id = request.path_params["id"]
        if not APPROVAL_ID.match(approval_id):
            return _refusal(404, HttpCode.APPROVAL_NOT_FOUND, f"no approval {approval_id!r}")
        try:
            body = await read_object(request)
            decision_from_body(approval_id, decision, body)
        except BadBody as exc:
            return JSONResponse({"error": exc.to_json()}, status_code=400)
        except BadDecision as exc:
            return _refusal(400, HttpCode.BAD_REQUEST, str(exc), _field_of(str(exc)))
        if not socket_path(self.state_dir).exists():
            return _refusal(503, HttpCode.NO_DAEMON, _NO_DAEMON)
        path = f"/v1/approvals/{path_segment(approval_id)}/{decision}?wait=1"
        try:
            status, answer = await asyncio.to_thread(self._ask, path, body)
        except NoDaemon:
            return _refusal(503, HttpCode.NO_DAEMON, _NO_DAEMON)
        except DaemonError as exc:
            message = f"{exc}; whether the decision was taken shows in the list once it is"
            return _refusal(504, HttpCode.NO_ANSWER, message)
        if not isinstance(answer, dict):
            return _refusal(502, HttpCode.BAD_ANSWER, f"the daemon answered {status} without JSON")
        return JSONResponse(answer, status_code=status)

    def _ask(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return DaemonApi(self.state_dir, timeout=DECIDE_TIMEOUT_SECONDS).call("POST", path, body)


def _port(request: Request) -> int:
    """The port the studio was reached on (its socket's, not the client's ``Host``)."""
    server = request.scope.get("server")  # ASGI scope, the server's; may be absent
    return int(server[1]) if server and server[1] is not None else 0


def _field_of(message: str) -> str | None:
    """The field a refusal of :func:`decision_from_body` is about (it names it first)."""
    name = message.partition(" ")[0]
    return name if name in ("arguments", "reason") else None


_OFF_LOOPBACK = (
    "this studio listens beyond loopback and has no login, so it takes no decisions: "
    "decide from a studio on 127.0.0.1, or with the CLI (approve / reject)"
)
_NO_SESSION = (
    "this browser has no session of this studio: open the link the studio printed when it "
    f"started (it carries ?{KEY_PARAM}=), then decide"
)
_WRONG_KEY = (
    "this link's key is not this studio's (was it restarted?): open the link it printed "
    "when it started"
)
_NO_DAEMON = "no daemon serves this state directory: a decision needs one (start the swarm)"
