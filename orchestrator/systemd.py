"""Readiness and stopping notices to systemd (``Type=notify``), without libsystemd.

systemd passes ``NOTIFY_SOCKET`` (a Unix datagram socket path, or an abstract one starting
with ``@``) to a service of ``Type=notify``; the service sends ``READY=1`` once it serves and
``STOPPING=1`` when it begins to stop. Outside systemd the variable is absent and nothing is
sent. A notice that cannot be sent is logged, never raised: it must not stop the daemon.
"""

from __future__ import annotations

import os
import socket

import structlog

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"


def notify(*fields: str) -> bool:
    """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=serving"``) to systemd, one per line;
    whether a notice was sent."""
    address = os.environ.get(NOTIFY_SOCKET_ENV)
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(fields).encode())
    except OSError as exc:
        structlog.get_logger("goondan.systemd").warning(
            "systemd notice not sent", notice=fields[0] if fields else "", error=str(exc)
        )
        return False
    return True
