"""The names a TCP listener answers to, read from Host headers and ``allowedHosts``."""

from __future__ import annotations

import socket

import pytest

from orchestrator.callers import Peer
from orchestrator.http.guard import HostAllowList, JsonOnly, normalise_origin, split_host


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("localhost:8080", ("localhost", 8080)),
        ("LocalHost", ("localhost", None)),
        ("[::1]:8080", ("::1", 8080)),
        ("[0:0::1]", ("::1", None)),
        ("api.example.com:443", ("api.example.com", 443)),
        ("::1", None),  # an IPv6 address in a Host header is bracketed
        ("a b", None),
        ("host:0", None),
        ("host:70000", None),
        ("[::g]:80", None),
        ("", None),
    ],
)
def test_hosts_are_read_as_a_browser_writes_them(
    value: str, parsed: tuple[str, int | None] | None
) -> None:
    assert split_host(value) == parsed


def tcp_peer(local: str = "127.0.0.1") -> Peer:
    return Peer(socket.AF_INET, address=("127.0.0.1", 50000), local=(local, 8080))


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("[::1]:8080", True),
        ("127.0.0.1:8081", False),  # another port is another origin
        ("127.0.0.1", False),  # port 80
        ("attacker.example:8080", False),  # DNS rebinding: the page's own name
        ("api.example.com:8080", True),  # allowedHosts without a port: any port
        ("api.example.com", True),
        ("proxy.example:443", True),
        ("proxy.example:8080", False),
        ("10.0.0.5:8080", True),  # the address the connection reached, written as one
        ("10.0.0.6:8080", False),
        (None, False),
    ],
)
def test_a_listener_serves_its_own_names_only(host: str | None, served: bool) -> None:
    hosts = HostAllowList.of("0.0.0.0", 8080, ["api.example.com", "proxy.example:443"])
    assert hosts.allows(host, tcp_peer("10.0.0.5")) is served


def test_the_bound_address_is_a_name_of_the_listener() -> None:
    hosts = HostAllowList.of("192.168.1.10", 8080)
    assert hosts.allows("192.168.1.10:8080", None)
    assert not hosts.allows("0.0.0.0:8080", None)
    with pytest.raises(ValueError, match="allowedHosts"):
        HostAllowList.of("127.0.0.1", 8080, ["[:::]"])


def test_origins_compare_as_browsers_serialise_them() -> None:
    assert normalise_origin("HTTPS://App.Example.com/") == "https://app.example.com"


def scope_of(method: str, *headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"type": "http", "method": method, "headers": list(headers)}


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        ("DELETE", (), False),  # the MCP client ends its session so
        ("DELETE", ((b"content-length", b"0"),), False),
        ("DELETE", ((b"content-length", b"7"),), True),
        ("DELETE", ((b"transfer-encoding", b"chunked"),), True),
        ("DELETE", ((b"content-type", b"text/plain"),), True),
        ("POST", (), True),
        ("POST", ((b"content-length", b"0"),), True),
        ("POST", ((b"content-type", b"application/json; charset=utf-8"),), False),
    ],
)
def test_only_a_delete_without_a_body_may_omit_the_json_type(
    method: str, headers: tuple[tuple[bytes, bytes], ...], refused: bool
) -> None:
    refusal = JsonOnly(None).refusal(scope_of(method, *headers))  # type: ignore[arg-type]
    assert (refusal is not None) == refused
    if refusal is not None:
        assert refusal.status == 415
