"""What a sandboxed program may connect to through the network proxy (``sandbox.network``).

``off`` gives the program a network namespace with nothing in it. ``on`` (``true``) lets it
reach the public internet through the proxy only; an object ``{allow, deny, hosts}`` is ``on``
with host-name rules:

- ``allow``: glob patterns (``example.com``, ``*.example.com``); when given, only a host one
  of them matches may be reached;
- ``deny``: glob patterns refused even when ``allow`` matches;
- ``hosts``: a static map ``{name: address}`` the proxy uses instead of DNS (like Docker's
  ``extra_hosts``).

Whatever the rules say, an address that is not the public internet's is refused *after*
resolution (the proxy connects to the address it checked and never resolves again, so a name
that rebinds to a private address gets nowhere): loopback, RFC 1918, CGNAT, link-local (cloud
metadata at 169.254.169.254), ``::1``, ULA, ``fe80::/10``, unspecified, multicast, reserved,
and every address of the host's own interfaces. A name with one such address among its answers
is refused whole.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tools_base._context import ToolConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_REFUSED_V4 = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # unspecified, "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # CGNAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
    )
)
_REFUSED_V6 = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # unspecified, loopback and the deprecated IPv4-compatible form
        "fc00::/7",  # ULA
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
        "100::/64",  # discard
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_6TO4 = ipaddress.IPv6Network("2002::/16")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\.?$")
_PATTERN = re.compile(r"^(\*\.)?[a-z0-9_*]([a-z0-9_*-]{0,62})(\.[a-z0-9_*]([a-z0-9_*-]{0,62}))*$")


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _6TO4:
        return address.sixtofour
    return None


def refused_address(address: IPAddress, own: Iterable[IPAddress] = ()) -> str | None:
    """Why ``address`` is not the public internet's, or ``None`` when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_v4(address)
        if inner is not None:
            said = refused_address(inner, own)
            return f"{address} carries {inner}: {said}" if said else None
        if address.scope_id:
            return f"{address} is a scoped (link-local) address"
        nets: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = _REFUSED_V6
    else:
        nets = _REFUSED_V4
    for net in nets:
        if address in net:
            return f"{address} is in {net}, not the public internet"
    if address in set(own):
        return f"{address} is an address of this host"
    return None


def host_addresses() -> set[IPAddress]:
    """Every address of this host's interfaces (its network namespace), read from ``/proc``."""
    found: set[IPAddress] = set()
    with contextlib.suppress(OSError), open("/proc/net/fib_trie", encoding="ascii") as trie:
        last = ""
        for line in trie:
            text = line.strip()
            if text.startswith(("|--", "+--")):
                last = text[3:].strip().split("/")[0]
            elif text == "/32 host LOCAL" and last:
                with contextlib.suppress(ValueError):
                    found.add(ipaddress.IPv4Address(last))
    with contextlib.suppress(OSError), open("/proc/net/if_inet6", encoding="ascii") as inet6:
        for line in inet6:
            word = line.split()[0] if line.split() else ""
            with contextlib.suppress(ValueError):
                found.add(ipaddress.IPv6Address(int(word, 16)))
    return found


def parse_address(text: str) -> IPAddress | None:
    """``text`` as an IP address (an IPv6 one may come in brackets), else ``None``."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def valid_host_name(host: str) -> bool:
    """Whether ``host`` is a host name the proxy will resolve (or an IP literal)."""
    return parse_address(host) is not None or (
        len(host) <= 253 and _HOST_NAME.match(host.lower()) is not None
    )


@dataclass(frozen=True, slots=True)
class NetworkRules:
    """Host-name rules of ``sandbox.network`` (its object form)."""

    allow: tuple[str, ...] = ()
    """Glob patterns of the hosts that may be reached; empty: any public host."""
    deny: tuple[str, ...] = ()
    """Glob patterns of hosts refused whatever ``allow`` says."""
    hosts: Mapping[str, str] = field(default_factory=dict)
    """Static name → address map used instead of DNS."""

    def refused_host(self, host: str) -> str | None:
        """Why the rules refuse ``host`` (before resolution), or ``None``."""
        name = host.lower().rstrip(".")
        for pattern in self.deny:
            if fnmatch.fnmatchcase(name, pattern):
                return f"{host} matches sandbox.network.deny {pattern!r}"
        if self.allow and not any(fnmatch.fnmatchcase(name, p) for p in self.allow):
            return f"{host} matches no pattern of sandbox.network.allow"
        return None

    def mapped(self, host: str) -> IPAddress | None:
        """The address ``hosts`` gives ``host``, if any."""
        text = self.hosts.get(host.lower().rstrip("."))
        return ipaddress.ip_address(text) if text is not None else None


AddressCheck = Callable[[IPAddress], "str | None"]
"""Why an address is refused, or ``None``: :func:`public_only` unless a caller measures."""


def public_only(address: IPAddress) -> str | None:
    """The address check of ``sandbox.network: on``: the public internet only (the host's
    own addresses read anew each time: interfaces come and go)."""
    said = refused_address(address)
    if said is not None:
        return said
    return refused_address(address, host_addresses())


def _patterns(tool: str, key: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ToolConfigError(f"{tool} config 'sandbox.network.{key}' must be a list of strings")
    out = []
    for pattern in value:
        lowered = pattern.lower().rstrip(".")
        if parse_address(lowered) is None and not _PATTERN.match(lowered):
            raise ToolConfigError(
                f"{tool} config 'sandbox.network.{key}' has {pattern!r}, which is not a host "
                "name pattern (letters, digits, '-', '.', '*'; like '*.example.com')"
            )
        out.append(lowered)
    return tuple(out)


def _hosts(tool: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ToolConfigError(f"{tool} config 'sandbox.network.hosts' must be an object")
    out = {}
    for name, address in value.items():
        lowered = str(name).lower().rstrip(".")
        if not isinstance(name, str) or not _HOST_NAME.match(lowered):
            raise ToolConfigError(
                f"{tool} config 'sandbox.network.hosts' has {name!r}, which is not a host name"
            )
        parsed = parse_address(address) if isinstance(address, str) else None
        if parsed is None:
            raise ToolConfigError(
                f"{tool} config 'sandbox.network.hosts.{name}' must be an IP address, "
                f"got {address!r}"
            )
        out[lowered] = str(parsed)
    return out


def parse_network(tool: str, raw: object) -> tuple[bool, NetworkRules]:
    """``sandbox.network`` as ``(on, rules)``: ``off``/``false``, ``on``/``true`` or an object
    ``{allow, deny, hosts}`` (which is on); a mistake is a :class:`ToolConfigError`."""
    if raw is False or raw == "off":
        return False, NetworkRules()
    if raw is True or raw == "on":
        return True, NetworkRules()
    if not isinstance(raw, dict):
        raise ToolConfigError(
            f"{tool} config 'sandbox.network' must be off, on (or false/true) or an object "
            f"{{allow, deny, hosts}}, got {raw!r}"
        )
    unknown = sorted(set(raw) - {"allow", "deny", "hosts"})
    if unknown:
        raise ToolConfigError(
            f"{tool} config 'sandbox.network' has unknown key(s) "
            f"{', '.join(map(repr, unknown))}; known keys: allow, deny, hosts"
        )
    return True, NetworkRules(
        allow=_patterns(tool, "allow", raw.get("allow")),
        deny=_patterns(tool, "deny", raw.get("deny")),
        hosts=_hosts(tool, raw.get("hosts")),
    )
