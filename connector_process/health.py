"""What a connector's process tells the daemon about its source's health, secrets removed.

The daemon shows a Connection's last error in ``status``, the HTTP API, the studio and the
metrics, so the text must hold nothing secret even when a connector's own message quotes a
token (a URL with the token in its path or query, a config value). :class:`Redactor` replaces
every value of the Connection's ``secrets``, every ``config`` value and environment variable
whose name looks secret, URL credentials and secret-looking query parameters, and cuts the text
to :data:`MAX_ERROR_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_ERROR_CHARS = 300
"""The longest error text reported; longer ones are cut and end with ``…``."""
REDACTED = "[redacted]"
_MIN_SECRET_CHARS = 4
"""Shorter values are not replaced: ``"1"`` would blank every digit of a message."""
_SECRET_NAME = re.compile(r"token|secret|key|passw|auth|credential|signing|cookie", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&][^=&\s]*(?:token|key|secret|sig|password|auth)[^=&\s]*=)[^&\s#]+",
    re.IGNORECASE,
)
_TELEGRAM_BOT_PATH = re.compile(r"/bot\d+:[A-Za-z0-9_-]+")


class Redactor:
    """Makes an error text safe to show (see the module docstring)."""

    def __init__(
        self,
        secrets: Mapping[str, str],
        config: Mapping[str, str],
        environ: Mapping[str, str],
    ) -> None:
        values = set(secrets.values())
        values |= {v for k, v in config.items() if _SECRET_NAME.search(k)}
        values |= {v for k, v in environ.items() if _SECRET_NAME.search(k)}
        self._values = sorted(
            (v for v in values if len(v.strip()) >= _MIN_SECRET_CHARS), key=len, reverse=True
        )

    def __call__(self, text: str) -> str:
        """``text`` without secrets, on one line, at most :data:`MAX_ERROR_CHARS` long."""
        for value in self._values:
            text = text.replace(value, REDACTED)
        text = _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)
        text = _SECRET_QUERY.sub(rf"\g<name>{REDACTED}", text)
        text = _TELEGRAM_BOT_PATH.sub(f"/bot{REDACTED}", text)
        text = " ".join(text.split())
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 1] + "…"
        return text or "unknown error"
