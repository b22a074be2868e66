"""A phase's network policy: Harbor's `network_mode` and `allowed_hosts`, as checks the proxy makes.

A request is checked twice: its host as named, then every address the proxy connects to (it resolves names itself).
The second check defends against DNS rebinding: loopback, private ranges and this host's networks are refused unless
that address is listed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from agentbake.errors import ConfigError

NetworkMode = Literal["no-network", "public", "allowlist"]
NETWORK_MODES: tuple[str, ...] = ("no-network", "public", "allowlist")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never reached unless listed by address: this host, its neighbours, and what is not a unicast destination.
# Documentation ranges (192.0.2.0/24, ...) are not here: an intercepting proxy may answer on one.
_FORBIDDEN: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",  # unspecified, "this network"
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",  # Docker's bridges live here
        "192.168.0.0/16",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",
        "::1/128",
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
    )
)

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")


def normalize_name(host: str) -> str:
    """A host name as the allowlist compares it: lower case, without a trailing dot."""
    return host.strip().lower().removesuffix(".")


def parse_address(host: str) -> IPAddress | None:
    """`host` as an IP address (an IPv4-mapped IPv6 address as IPv4), or None when it is a name."""
    text = host.strip().removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def valid_name(host: str) -> bool:
    """Whether `host` (normalized) is a DNS name the proxy will look up: ASCII labels only."""
    return len(host) <= 253 and bool(_NAME.match(host))


@cache
def host_networks() -> tuple[IPNetwork, ...]:
    """This host's own addresses and attached networks (LAN, Docker's bridges), read from /proc."""
    found: list[IPNetwork] = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 8 and int(parts[2], 16) == 0 and int(parts[1], 16) != 0:  # on-link, not the default
            network = ipaddress.IPv4Address(bytes.fromhex(parts[1])[::-1])
            mask = ipaddress.IPv4Address(bytes.fromhex(parts[7])[::-1])
            found.append(ipaddress.IPv4Network(f"{network}/{mask}", strict=False))
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            found.append(
                ipaddress.IPv6Network(
                    f"{ipaddress.IPv6Address(bytes.fromhex(parts[0]))}/{int(parts[2], 16)}", strict=False
                )
            )
    return tuple(found)


def forbidden_address(address: IPAddress) -> bool:
    """Whether `address` is one the proxy reaches only when it is listed by address."""
    return any(address in network for network in (*_FORBIDDEN, *host_networks()))


@dataclass(frozen=True)
class Allowlist:
    """Harbor's `allowed_hosts`, parsed: exact names, `*.` suffixes, and addresses (an IP is a /32 or /128)."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    """`*.pypi.org` is kept as `.pypi.org`: it matches `files.pypi.org` and `a.b.pypi.org`, not `pypi.org`
    itself (list both when both are meant) and not `evil-pypi.org`."""
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: list[str] | tuple[str, ...], *, where: str = "allowed_hosts") -> Allowlist:
        """Parse `entries`; a bad one is a ConfigError naming `where`, the entry and the accepted forms."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = str(raw).strip()
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                    continue
                except ValueError:
                    pass
            elif (address := parse_address(entry)) is not None:
                networks.append(ipaddress.ip_network(address))
                continue
            name = normalize_name(entry)
            wildcard = name.startswith("*.")
            if valid_name(name.removeprefix("*.")) and "*" not in name.removeprefix("*."):
                if wildcard:
                    suffixes.append(name[1:])
                else:
                    names.add(name)
                continue
            raise ConfigError(
                f"{where}: {entry!r} is not a host: expected a host name (pypi.org), a wildcard (*.pypi.org), "
                "an IP address (192.0.2.7, 2001:db8::7) or a CIDR (192.0.2.0/24); no scheme, port or path"
            )
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def has_name(self, name: str) -> bool:
        return name in self.names or any(name.endswith(suffix) for suffix in self.suffixes)

    def has_address(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class Policy:
    """What one phase of one sandbox may reach. `phase` names it in refusals ("agent", "verifier")."""

    mode: NetworkMode
    phase: str
    allowlist: Allowlist = field(default_factory=Allowlist)

    @classmethod
    def build(cls, mode: str, phase: str, hosts: list[str] | tuple[str, ...] = (), *, where: str = "") -> Policy:
        """A policy from Harbor's keys; an unknown mode, or hosts outside `allowlist` mode, is a ConfigError."""
        label = where or f"[{phase}]"
        if mode not in NETWORK_MODES:
            raise ConfigError(f"{label} network_mode: {mode!r} is not one of {', '.join(NETWORK_MODES)}")
        if hosts and mode != "allowlist":
            raise ConfigError(f'{label} allowed_hosts: only used with network_mode = "allowlist" (it is {mode!r})')
        return cls(mode, phase, Allowlist.parse(tuple(hosts), where=f"{label} allowed_hosts"))  # type: ignore[arg-type]

    def check_host(self, host: str) -> str | None:
        """Why a request naming `host` (a name or an IP literal) is refused before any lookup, or None."""
        if self.mode == "no-network":
            return f"the {self.phase} phase has no network"
        address = parse_address(host)
        if address is not None:
            return self.check_literal(address)
        name = normalize_name(host)
        if not valid_name(name):
            return f"{host!r} is not a valid host name"
        if self.mode == "allowlist" and not self.allowlist.has_name(name):
            return f"{name} is not in the {self.phase} phase's allowed_hosts"
        return None

    def check_address(self, address: IPAddress) -> str | None:
        """Why connecting to `address` is refused, or None. In allowlist mode an address literal must be listed; a
        listed name's addresses need not be."""
        if self.mode == "no-network":
            return f"the {self.phase} phase has no network"
        if self.allowlist.has_address(address):
            return None
        if forbidden_address(address):
            return f"{address} is a loopback, private or host-local address not listed in allowed_hosts"
        return None

    def check_literal(self, address: IPAddress) -> str | None:
        """Why a request naming the address literal `address` is refused: in allowlist mode it must be listed."""
        if self.mode == "allowlist" and not self.allowlist.has_address(address):
            return f"{address} is not in the {self.phase} phase's allowed_hosts"
        return self.check_address(address)
