"""Who may decide from the studio: whoever opened the link it printed, in a browser.

Anything on this machine that can open a TCP connection to loopback can send the studio any
request a browser can, with any header (``Origin``, ``Sec-Fetch-Site``, a cookie): a sandboxed
program with network, an MCP server. So no answer the studio serves over HTTP may be enough to
decide: reading the page, ``/api/session`` or any other route must leave a program as far from
a decision as it was. What such a program cannot do is read the terminal the operator started
the studio in. The scheme rests on that:

1. **The link.** At start the studio makes a random key (:attr:`StudioSession.key`, 256 bits)
   and prints its address with it, ``http://127.0.0.1:7711/?key=…`` (and opens that in a
   browser with ``--open``). The key never appears in a log, an answer or the page.
2. **The cookie.** ``GET /?key=…`` with the right key (and only then) answers the page with
   ``Set-Cookie: goondan-studio-<port>=<nonce>.<mac>; HttpOnly; SameSite=Strict; Path=/``: a
   fresh random nonce, signed with the studio's secret (HMAC-SHA256, a secret made at start:
   a restarted studio accepts none of its predecessor's cookies). ``HttpOnly``: no script
   reads it; ``SameSite=Strict``: no other site's page makes the browser send it; the port in
   its name keeps two studios on one host apart (cookies do not separate ports).
3. **The token.** The same answer embeds, in a ``<meta name="goondan-csrf">`` of the page, the
   token bound to that cookie (HMAC of its nonce under another label). The page's script moves
   it to the origin's ``localStorage`` (which, unlike cookies, is kept per port) and drops the
   key from the address bar. No route ever serves the token to a request: ``/api/session``
   says only whether this browser may decide (``canDecide``, and ``why`` not).
4. **A decision** (``POST /api/approvals/{id}/approve|reject``) needs all of: the studio on
   loopback; ``Sec-Fetch-Site: same-origin`` and ``Sec-Fetch-Mode`` ``cors`` or
   ``same-origin`` when sent (every current browser sends them and no page can forge them);
   ``Origin`` naming the studio itself; ``Content-Type: application/json``; a valid cookie; and
   in ``X-Goondan-Csrf`` the token bound to that very cookie (a token from another session, or
   from a studio run before, is refused). :mod:`orchestrator.studio.decisions` checks them.

Each layer stops something the others do not: the key is what a program without the terminal
lacks; the cookie is what a page elsewhere cannot make its browser send; the token, kept per
origin, is what a page on another loopback port (which the browser does send the cookie to)
cannot read; ``Origin`` and ``Sec-Fetch-*`` say the same of pages, checked by the browser.
What it does not stop: a process that reads the printed link (the operator's own account,
through the terminal's scrollback, a service's journal, or the command line of the browser the
studio opened), or script injected into the studio's page. Off loopback no link carries a key
and no decision is taken.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

__all__ = ["COOKIE_PREFIX", "KEY_PARAM", "TOKEN_META", "StudioSession"]

COOKIE_PREFIX = "goondan-studio-"
"""The session cookie's name, before the studio's port."""
KEY_PARAM = "key"
"""The query parameter of the printed link that carries the key."""
TOKEN_META = "goondan-csrf"
"""The ``<meta name>`` the page reads its token from."""


def _mac(secret: bytes, label: bytes, nonce: str) -> str:
    digest = hmac.new(secret, label + b":" + nonce.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class StudioSession:
    """The studio's key, and the cookies and tokens it signs (see the module docstring)."""

    key: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    """What the printed link carries; whoever presents it gets a session."""
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    """Signs cookies and tokens; made at start, never shown."""

    def key_matches(self, given: str) -> bool:
        """Whether ``given`` is the key (compared in constant time)."""
        return hmac.compare_digest(given.encode(), self.key.encode())

    def mint(self) -> tuple[str, str]:
        """A new session: ``(cookie value, its token)``."""
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{_mac(self.secret, b'cookie', nonce)}", _mac(self.secret, b"csrf", nonce)

    def token_of(self, cookie: str | None) -> str | None:
        """The token bound to ``cookie``, or ``None`` when it is no cookie this studio signed."""
        if not cookie:
            return None
        nonce, dot, mac = cookie.partition(".")
        expected = _mac(self.secret, b"cookie", nonce).encode()
        if not dot or not hmac.compare_digest(mac.encode(), expected):
            return None
        return _mac(self.secret, b"csrf", nonce)

    @staticmethod
    def cookie_name(port: int) -> str:
        """The cookie of the studio listening on ``port``."""
        return f"{COOKIE_PREFIX}{port}"

    def link(self, url: str) -> str:
        """``url`` (the studio's address) with the key."""
        return f"{url}?{KEY_PARAM}={self.key}"
