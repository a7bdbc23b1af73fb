"""Server URLs fit to show: the cluster's NATS URLs reach log lines, errors and ``status``, and
the password or token in their user information must not."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """``url`` (or a comma-separated list of them) with any password or token in its user
    information shown as ``***``; the rest, host included, as written."""
    shown = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if "@" in parts.netloc:
            host = parts.netloc.rsplit("@", 1)[1]
            user = f"{parts.username}:***" if parts.password is not None else "***"
            parts = parts._replace(netloc=f"{user}@{host}")
        shown.append(urlunsplit(parts))
    return ",".join(shown)
