"""What the daemon's HTTP API and the studio share: the socket family of the address they
listen on. (Both serve through :class:`goondan.http_server.GuardedServer`, which leaves the
process's signals to its owner.)"""

from __future__ import annotations

import ipaddress
import socket


def address_family(host: str) -> socket.AddressFamily:
    """``AF_INET6`` for an IPv6 address, else ``AF_INET`` (names resolve to IPv4 first)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET
