"""The ``error.code`` of the HTTP API's and the studio's own refusals, as names the type
checker sees: a site answers ``HttpCode.ORIGIN_NOT_ALLOWED``, so a code outside the catalogue
fails mypy, and a member without its meaning fails this module's import. An answer that carries
a request's failure uses that failure's delivery code instead (``AGENT_NOT_FOUND``)."""

from __future__ import annotations

import enum

from goondan.catalogue import Audience, Catalogue, ErrorCode


class HttpCode(enum.StrEnum):
    """The codes of :data:`HTTP`, as names the type checker sees."""

    BAD_REQUEST = "BAD_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    MISDIRECTED_REQUEST = "MISDIRECTED_REQUEST"
    HOST_INVALID = "HOST_INVALID"
    ORIGIN_NOT_ALLOWED = "ORIGIN_NOT_ALLOWED"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    SERVER_BUSY = "SERVER_BUSY"
    HTTP_ERROR = "HTTP_ERROR"
    INSTANCE_NOT_DELETED = "INSTANCE_NOT_DELETED"
    INSTANCE_NOT_RESTARTED = "INSTANCE_NOT_RESTARTED"
    APPROVAL_NOT_FOUND = "APPROVAL_NOT_FOUND"
    APPROVAL_ALREADY_DECIDED = "APPROVAL_ALREADY_DECIDED"
    APPROVAL_INVALID_ARGUMENTS = "APPROVAL_INVALID_ARGUMENTS"
    APPROVAL_FORBIDDEN = "APPROVAL_FORBIDDEN"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    REQUEST_NOT_FOUND = "REQUEST_NOT_FOUND"
    STUDIO_NOT_ON_LOOPBACK = "STUDIO_NOT_ON_LOOPBACK"
    CSRF_TOKEN_INVALID = "CSRF_TOKEN_INVALID"
    STUDIO_SESSION_INVALID = "STUDIO_SESSION_INVALID"
    NO_DAEMON = "NO_DAEMON"
    NO_ANSWER = "NO_ANSWER"
    BAD_ANSWER = "BAD_ANSWER"


_MEANINGS: dict[HttpCode, tuple[str, str | None]] = {
    HttpCode.BAD_REQUEST: (
        "the request body or a parameter is not what the endpoint takes (`field` names it)",
        "Fix the field named.",
    ),
    HttpCode.UNAUTHORIZED: (
        "no API token, or not the daemon's, on a listener that needs one",
        "Send `Authorization: Bearer <token>` with the daemon's token.",
    ),
    HttpCode.NOT_FOUND: ("no such endpoint or object", "Check the path."),
    HttpCode.METHOD_NOT_ALLOWED: (
        "the endpoint does not take this method",
        "Use the method the API reference names.",
    ),
    HttpCode.PAYLOAD_TOO_LARGE: (
        "the request body is over the API's limit",
        "Send less; long input belongs in a file the agent reads.",
    ),
    HttpCode.UNSUPPORTED_MEDIA_TYPE: (
        "a body that is not JSON: the API takes `Content-Type: application/json` only",
        "Send the body as JSON with that header.",
    ),
    HttpCode.MISDIRECTED_REQUEST: (
        "the `Host` header is not one the daemon serves (a DNS-rebinding guard)",
        "Call the daemon by an address it listens on, or add the name to its allowed hosts.",
    ),
    HttpCode.HOST_INVALID: (
        "two `Host` headers, none on HTTP/1.1, or a request target that is not a path or "
        "names another host than `Host` (400, on every server)",
        "Send one `Host` and the path alone as the target.",
    ),
    HttpCode.ORIGIN_NOT_ALLOWED: (
        "a browser request from an `Origin` the daemon does not allow",
        "Add the origin to the allowed origins, or call from a non-browser client.",
    ),
    HttpCode.REQUEST_TIMEOUT: (
        "the request's head or body did not arrive in time",
        "Send the whole request promptly.",
    ),
    HttpCode.SERVER_BUSY: (
        "too many connections wait already, from this peer or in all",
        "Retry later, with fewer connections at once.",
    ),
    HttpCode.HTTP_ERROR: ("an HTTP error with no code of its own (the status says which)", None),
    HttpCode.INSTANCE_NOT_DELETED: (
        "the instance could not be deleted (the message says why, e.g. it is running a Turn)",
        "Retry once its Turn ends.",
    ),
    HttpCode.INSTANCE_NOT_RESTARTED: (
        "the instance could not be restarted (the message says why)",
        None,
    ),
    HttpCode.APPROVAL_NOT_FOUND: (
        "no pending approval has this id (never asked, decided, or timed out)",
        "List the pending approvals.",
    ),
    HttpCode.APPROVAL_ALREADY_DECIDED: (
        "the approval was decided already; the first decision stands",
        None,
    ),
    HttpCode.APPROVAL_INVALID_ARGUMENTS: (
        "the edited arguments of an approval do not fit the tool's schema",
        "Fix the arguments the message names.",
    ),
    HttpCode.APPROVAL_FORBIDDEN: (
        "the caller may not decide this approval (the agent's approvers do not include it)",
        "Decide as one of the approvers the Agent names.",
    ),
    HttpCode.IDEMPOTENCY_KEY_REUSED: (
        "the `Idempotency-Key` was used with another request body within its retention (422)",
        "Use a fresh key for a new request; resend the same body to get the first answer.",
    ),
    HttpCode.REQUEST_NOT_FOUND: (
        "no request has this id: never accepted, or answered longer ago than the retention",
        "Check the id the `X-Goondan-Request-Id` header gave.",
    ),
    HttpCode.STUDIO_NOT_ON_LOOPBACK: (
        "the studio takes decisions only when it listens on loopback",
        "Serve the studio on 127.0.0.1, or decide with `goondan approve`.",
    ),
    HttpCode.CSRF_TOKEN_INVALID: (
        "a studio decision without the page's CSRF token",
        "Reload the studio page and decide again.",
    ),
    HttpCode.STUDIO_SESSION_INVALID: (
        "a studio decision without the session cookie its printed link sets, or a link whose "
        "key is not the studio's",
        "Open the link the studio printed when it started (with `?key=`), then decide.",
    ),
    HttpCode.NO_DAEMON: (
        "no daemon serves the state directory, so the studio cannot pass the decision on",
        "Start the swarm.",
    ),
    HttpCode.NO_ANSWER: (
        "the daemon took the studio's decision but did not answer in time",
        "Check the daemon's log; the decision may have been applied.",
    ),
    HttpCode.BAD_ANSWER: (
        "the daemon answered the studio with something other than JSON",
        "Check that the socket is a goondan daemon's.",
    ),
}

HTTP = Catalogue(Audience.HTTP, *(ErrorCode(code, *_MEANINGS[code]) for code in HttpCode))
"""The catalogue of :class:`HttpCode`, in its order."""
