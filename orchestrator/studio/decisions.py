"""Deciding a parked tool call from the studio: checked here, carried out by the daemon.

The studio never writes an approval itself. A decision goes to the daemon's own route
(``POST /v1/approvals/{id}/approve|reject?wait=1`` on ``<state>/api.sock``), so the daemon
checks it as it checks the CLI's (an operator's process, not an agent's), records who made
it (``decidedBy``: the studio's process, its uid and user), and answers with the Turn's end.
The socket needs no token, so the page never holds one: the studio's server asks on its
behalf.

The studio has no login, so before it asks, a request must show it comes from the studio's
own page (a page elsewhere can make a browser send requests to 127.0.0.1):

- the studio listens on loopback (off it, whoever reaches the address could approve: it only
  shows there);
- ``Origin`` names the studio itself (``http://`` + the ``Host`` it was asked at, which
  :class:`~orchestrator.studio.server` already holds to loopback names): browsers send it on
  every ``POST``, so a request without one came from no page of ours;
- ``Content-Type: application/json``, which a page elsewhere can send only after a CORS
  preflight the studio never grants;
- the header :data:`CSRF_HEADER` carrying the studio's :attr:`DecisionGate.csrf_token`, a
  secret made when it starts and handed out only by ``GET /api/session``, which a page
  elsewhere cannot read (no CORS).

Each refusal says which check failed; the body is checked as the daemon checks it (the same
:func:`~orchestrator.approvals.decision_from_body`), naming the field that is wrong.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse

from goondan.errors import DaemonError, HttpCode
from orchestrator.approvals import APPROVAL_ID, BadDecision, decision_from_body
from orchestrator.http.body import BadBody, read_object
from orchestrator.http.client import DaemonApi, NoDaemon, path_segment, socket_path

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
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    def session(self) -> dict[str, Any]:
        """``GET /api/session``: the CSRF token, and whether this studio may decide."""
        return {
            "csrfToken": self.csrf_token,
            "canDecide": self.on_loopback,
            "why": None if self.on_loopback else _OFF_LOOPBACK,
        }

    def refused(self, request: Request) -> JSONResponse | None:
        """The answer refusing ``request`` before its body is read, or ``None``."""
        if not self.on_loopback:
            return _refusal(403, HttpCode.STUDIO_NOT_ON_LOOPBACK, _OFF_LOOPBACK)
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
        given = request.headers.get(CSRF_HEADER, "").encode()
        if not hmac.compare_digest(given, self.csrf_token.encode()):
            return _refusal(
                403,
                HttpCode.CSRF_TOKEN_INVALID,
                f"a decision must carry the studio's token in {CSRF_HEADER} "
                "(GET /api/session): reload the page",
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


def _field_of(message: str) -> str | None:
    """The field a refusal of :func:`decision_from_body` is about (it names it first)."""
    name = message.partition(" ")[0]
    return name if name in ("arguments", "reason") else None


_OFF_LOOPBACK = (
    "this studio listens beyond loopback and has no login, so it takes no decisions: "
    "decide from a studio on 127.0.0.1, or with the CLI (approve / reject)"
)
_NO_DAEMON = "no daemon serves this state directory: a decision needs one (start the swarm)"
