"""``sandbox.network``: its config, the addresses ``on`` always refuses, the host-name rules,
and the proxy's parsing of hostile request heads."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tools_base import ToolConfigError
from tools_base.sandbox import SandboxPolicy
from tools_base.sandbox._netpolicy import (
    NetworkRules,
    host_addresses,
    parse_network,
    public_only,
    refused_address,
)
from tools_base.sandbox._proxy_wire import MAX_HEAD_BYTES, WireError, parse_head, split_authority

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.1.1",
    "100.64.0.1",  # CGNAT
    "169.254.169.254",  # cloud metadata
    "0.0.0.0",
    "224.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "ff02::1",
    "::ffff:10.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "::127.0.0.1",  # IPv4-compatible
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "198.51.100.2", "172.32.0.1", "2001:4860:4860::8888"]


@pytest.mark.parametrize("text", REFUSED)
def test_on_always_refuses_what_is_not_the_public_internet(text: str) -> None:
    address = ipaddress.ip_address(text)
    assert refused_address(address) is not None
    assert public_only(address) is not None


@pytest.mark.parametrize("text", PUBLIC)
def test_public_addresses_pass(text: str) -> None:
    assert refused_address(ipaddress.ip_address(text)) is None


def test_the_hosts_own_addresses_are_refused() -> None:
    mine = host_addresses()
    assert ipaddress.ip_address("127.0.0.1") in mine  # read from this machine's /proc
    public = ipaddress.ip_address("198.51.100.9")
    assert refused_address(public, [public]) == "198.51.100.9 is an address of this host"


def test_the_rules_match_host_names() -> None:
    rules = NetworkRules(allow=("*.example.com", "example.org"), deny=("bad.example.com",))
    assert rules.refused_host("api.example.com") is None
    assert rules.refused_host("API.Example.COM.") is None
    assert rules.refused_host("example.org") is None
    assert "deny" in (rules.refused_host("bad.example.com") or "")
    assert "allow" in (rules.refused_host("example.com") or "")  # the apex is not *.example.com
    assert "allow" in (rules.refused_host("example.com.evil.net") or "")
    assert "allow" in (rules.refused_host("93.184.216.34") or "")
    assert NetworkRules().refused_host("anything.net") is None


@pytest.mark.parametrize(
    ("raw", "on"), [(False, False), ("off", False), (True, True), ("on", True), ({}, True)]
)
def test_off_and_on_and_their_aliases(raw: Any, on: bool) -> None:
    assert parse_network("bash", raw) == (on, NetworkRules())
    policy = SandboxPolicy.from_config("bash", {"network": raw})
    assert policy.network is on


def test_the_object_form() -> None:
    on, rules = parse_network(
        "bash",
        {"allow": ["*.Example.com"], "deny": ["x.example.com"], "hosts": {"Api.Test": "::1"}},
    )
    assert on
    assert rules.allow == ("*.example.com",)
    assert rules.deny == ("x.example.com",)
    assert rules.mapped("api.test.") == ipaddress.ip_address("::1")


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("yes", "'sandbox.network' must be off, on"),
        (1, "'sandbox.network' must be off, on"),
        ({"allow": "example.com"}, "'sandbox.network.allow' must be a list"),
        ({"deny": ["exa mple.com"]}, "'sandbox.network.deny' has 'exa mple.com'"),
        ({"allow": ["http://x.com"]}, "'sandbox.network.allow' has 'http://x.com'"),
        ({"hosts": {"a.test": "not-an-ip"}}, "'sandbox.network.hosts.a.test' must be an IP"),
        ({"hosts": {"a b": "1.2.3.4"}}, "'sandbox.network.hosts' has 'a b'"),
        ({"hosts": ["a.test"]}, "'sandbox.network.hosts' must be an object"),
        ({"alow": []}, "unknown key(s) 'alow'"),
    ],
)
def test_a_bad_network_config_names_its_key(raw: Any, names: str) -> None:
    with pytest.raises(ToolConfigError) as raised:
        SandboxPolicy.from_config("bash", {"network": raw})
    assert names in str(raised.value)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_connect_and_its_authority() -> None:
    request = parse_head(head("CONNECT Example.COM:443 HTTP/1.1", "Host: example.com:443"))
    assert (request.tunnel, request.host, request.port) == (True, "example.com", 443)
    v6 = parse_head(head("CONNECT [2001:db8::1]:8443 HTTP/1.1"))
    assert (v6.host, v6.port) == ("2001:db8::1", 8443)


@pytest.mark.parametrize(
    "authority",
    [
        "example.com",  # no port
        "example.com:",
        "example.com:0",
        "example.com:65536",
        "example.com:99999999999",
        "example.com:443x",
        "::1:443",  # an IPv6 literal without brackets
        "[::1:443",
        "[127.0.0.1]:443",
        "[not-v6]:443",
        "user@example.com:443",
        "exa mple.com:443",
        "example.com/x:443",
        "",
        "-bad-.com:443" + "x" * 300,
    ],
)
def test_a_malformed_authority_is_400(authority: str) -> None:
    with pytest.raises(WireError) as raised:
        split_authority(authority)
    assert raised.value.status == 400


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        (("CONNECT example.com:443",), 400),  # no version
        (("CONNECT  example.com:443 HTTP/1.1",), 400),
        (("CONNECT example.com:443 HTTP/2.0",), 505),
        (("GET /path HTTP/1.1", "Host: example.com"), 400),  # origin-form: not a proxy request
        (("GET https://example.com/ HTTP/1.1",), 400),  # https is CONNECT's
        (("GET http://user:pw@example.com/ HTTP/1.1",), 400),
        (("GET http://example.com/ HTTP/1.1", "No colon here"), 400),
        (("GET http://example.com/ HTTP/1.1", "Bad Name: x"), 400),
        (("G\x00T http://example.com/ HTTP/1.1",), 400),
        (("GET http://exämple.com/ HTTP/1.1",), 400),
        (("GET http://example.com/ HTTP/1.1", "X: a\nHost: elsewhere.test"), 400),  # bare LF
        (("GET http://example.com/ HTTP/1.1", "X: a\rb"), 400),
    ],
)
def test_a_hostile_head_is_refused(lines: tuple[str, ...], status: int) -> None:
    with pytest.raises(WireError) as raised:
        parse_head(head(*lines))
    assert raised.value.status == status


def test_an_oversized_head_is_431() -> None:
    with pytest.raises(WireError) as raised:
        parse_head(head("GET http://example.com/ HTTP/1.1", "X: " + "a" * MAX_HEAD_BYTES))
    assert raised.value.status == 431


def test_plain_http_is_forwarded_as_one_origin_form_request() -> None:
    request = parse_head(
        head(
            "GET http://Example.com:8080/a/b?c=d HTTP/1.1",
            "Host: elsewhere.test",
            "Proxy-Authorization: Basic c2VjcmV0",
            "Proxy-Connection: keep-alive",
            "Connection: keep-alive",
            "Accept: */*",
        )
    )
    assert (request.tunnel, request.host, request.port) == (False, "example.com", 8080)
    assert request.forward == head(
        "GET /a/b?c=d HTTP/1.1", "Host: Example.com:8080", "Accept: */*", "Connection: close"
    )
