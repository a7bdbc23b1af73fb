"""One answer to "does this host name only this machine?", for every place that relaxes a rule
on loopback (plain http to a local server, a listener without a token, the studio's decisions,
the approvers' peer check)."""

from __future__ import annotations

import ipaddress

LOCALHOST = "localhost"
"""The one host name taken as loopback without resolving it (RFC 6761 reserves it)."""


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names only this machine.

    Accepted: the name ``localhost`` (any case; no trailing dot, no subdomain), an address in
    127.0.0.0/8, ``::1`` (with or without a zone such as ``%lo``), and the IPv4-mapped form of a
    127.0.0.0/8 address (``::ffff:127.0.0.1``: how a dual-stack listener sees an IPv4 peer). An
    IPv6 literal may be written in brackets (``[::1]``), as in a URL or ``--listen``. Anything
    else, other names included, is not loopback: no name is resolved here.
    """
    if not host:
        return False
    if host.lower() == LOCALHOST:
        return True
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    if bracketed and not isinstance(address, ipaddress.IPv6Address):
        return False  # brackets enclose an IPv6 literal only
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
