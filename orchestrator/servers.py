"""What the daemon's HTTP API and the studio's server share: a uvicorn server that leaves the
process's signals to its owner, and the socket family of the address it listens on."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator

import uvicorn


class SignalFreeServer(uvicorn.Server):
    """A uvicorn server that installs no SIGINT/SIGTERM handlers: its owner (the daemon, or the
    studio) stops what it must first and then stops the server itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def address_family(host: str) -> socket.AddressFamily:
    """``AF_INET6`` for an IPv6 address, else ``AF_INET`` (names resolve to IPv4 first)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
