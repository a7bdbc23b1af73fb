"""http-fetch policy: which addresses are refused, allowedHosts entries, config validation."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tools_base import ToolConfigError
from tools_base.tools.http_fetch import configure, forbidden_reason, parse_host_entry


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.216.34", True),
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("10.0.0.1", False),
        ("172.16.5.4", False),
        ("192.168.0.1", False),
        ("100.64.0.1", False),
        ("169.254.1.1", False),
        ("0.0.0.0", False),
        ("255.255.255.255", False),
        ("240.0.0.1", False),
        ("224.0.0.251", False),
        ("::", False),
        ("::1", False),
        ("fc00::1", False),
        ("fe80::1", False),
        ("ff02::1", False),
        ("::ffff:10.0.0.1", False),
        ("2002:7f00:1::", False),
        ("64:ff9b::7f00:1", False),
    ],
)
def test_forbidden_reason(address: str, allowed: bool) -> None:
    reason = forbidden_reason(ipaddress.ip_address(address))
    assert (reason is None) == allowed, reason


def test_forbidden_reason_with_private_networks_allowed() -> None:
    assert forbidden_reason(ipaddress.ip_address("10.0.0.1"), allow_private=True) is None
    assert forbidden_reason(ipaddress.ip_address("127.0.0.1"), allow_private=True) is None
    for metadata in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"):
        assert forbidden_reason(ipaddress.ip_address(metadata), allow_private=True)


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("Example.com", ("example.com", None)),
        ("example.com:8080", ("example.com", 8080)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::1]", ("::1", None)),
        ("::1", ("::1", None)),
    ],
)
def test_parse_host_entry(entry: str, parsed: tuple[str, int | None]) -> None:
    assert parse_host_entry(entry) == parsed


@pytest.mark.parametrize(
    "config",
    [
        {"allowedHosts": ["a:notaport"]},
        {"allowedHosts": ["[::1"]},
        {"allowedHosts": "example.com"},
        {"allowedHosts": [""]},
        {"maxRedirects": -1},
        {"allowPrivateNetworks": "no"},
        {"allowedhosts": []},
    ],
)
def test_bad_config_is_rejected(config: dict[str, Any]) -> None:
    with pytest.raises(ToolConfigError):
        configure(config)
