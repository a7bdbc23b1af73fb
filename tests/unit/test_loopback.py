"""The one loopback rule: what relaxes plain http, a tokenless listener, the studio's decisions
and the approvers' peer check."""

from __future__ import annotations

import socket

import pytest

from goondan.loopback import is_loopback


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LocalHost",
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "[::1]",
        "::1%lo",
        "::ffff:127.0.0.1",
        "[::ffff:127.0.0.2]",
        "0:0:0:0:0:0:0:1",
    ],
)
def test_loopback_forms(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",
        "localhost.",
        "evil.localhost",
        "localhost.example.com",
        "127.0.0.1.nip.io",
        "0.0.0.0",
        "::",
        "10.0.0.1",
        "169.254.169.254",
        "::ffff:10.0.0.1",
        "64:ff9b::7f00:1",
        "[127.0.0.1]",
        "[::1",
        "::1]",
        "[[::1]]",
        "2130706433",
        "127.1",
        " 127.0.0.1",
    ],
)
def test_not_loopback(host: str | None) -> None:
    assert not is_loopback(host)


def test_an_ipv4_peer_seen_by_a_dual_stack_listener_is_loopback() -> None:
    """A dual-stack socket reports an IPv4 peer as ``::ffff:a.b.c.d``: that peer is local."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server.bind(("::ffff:127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            server.settimeout(5)
            peer, address = server.accept()
            with peer:
                assert address[0].startswith("::ffff:")
                assert is_loopback(address[0])
