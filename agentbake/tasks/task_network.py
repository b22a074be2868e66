"""Harbor's network keys (`network_mode`, `allowed_hosts`, the deprecated `allow_internet`) and the per-phase policy
they resolve to (`NetworkPolicy`).

`[environment]` sets the baseline. An `[agent]` or `[verifier]` table that sets either key replaces it for its
phase. `allowed_hosts` alone means allowlist; with another mode it is an error.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from agentbake.errors import TaskError

NetworkMode = Literal["no-network", "public", "allowlist"]
NETWORK_MODES: tuple[str, ...] = get_args(NetworkMode)
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class NetworkPolicy:
    """What one phase (the agent's, the verifier's) may reach, as the task declares it."""

    mode: NetworkMode = "public"
    """`no-network`: nothing but what agentbake itself provides (the model's gateway to the agent);
    `public`: the internet (Harbor's default when a task says nothing); `allowlist`: only `allowed_hosts`."""
    allowed_hosts: tuple[str, ...] = ()
    """For `allowlist`: lower-case host names without a trailing dot, `*.example.com` (any name under
    example.com, not example.com itself), IP addresses and CIDR networks (v4 or v6, in their compressed
    form); in the task's order, without duplicates. Empty with `allowlist` allows nothing beyond what
    `no-network` allows, as in Harbor. Always empty for the other modes."""


PUBLIC = NetworkPolicy("public")
"""Harbor's default policy for a phase when the task declares none."""


def host_entry(value: object, where: str) -> str:
    """One `allowed_hosts` entry normalized, or `TaskError` saying what it is and how to write it instead."""
    if not isinstance(value, str):
        raise TaskError(f'{where}: expected host names as strings, like "pypi.org", got {value!r}')
    host = value.strip().lower().rstrip(".")
    fix = f"{where}: {value!r}"
    if not host:
        raise TaskError(f"{fix}: an empty host; remove it")
    if "://" in host:
        bare = host.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0]
        raise TaskError(f"{fix}: a URL; write the host name only, e.g. {bare!r}")
    if host.startswith("[") and "]" in host:
        raise TaskError(f"{fix}: write an IPv6 address without brackets or port, e.g. {host[1 : host.index(']')]!r}")
    if "/" in host:
        try:
            return str(ipaddress.ip_network(host, strict=True))
        except ValueError:
            pass
        try:
            network = ipaddress.ip_network(host, strict=False)
        except ValueError:
            name = host.split("/", 1)[0]
            raise TaskError(f"{fix}: a path or a bad CIDR; an entry names a host only, e.g. {name!r}") from None
        raise TaskError(f"{fix}: host bits set in a CIDR; write the network, {str(network)!r}")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if ":" in host:
        name = host.rsplit(":", 1)[0]
        raise TaskError(f"{fix}: a port; ports are not part of an allowed host, write {name!r}")
    if host == "*":
        raise TaskError(f'{fix}: every host; write network_mode = "public" instead of an allowlist')
    name = host[2:] if host.startswith("*.") else host
    not_a_name = TaskError(
        f"{fix}: not a host name (letters, digits and '-' in dot-separated labels), a '*.' wildcard, "
        "an IP address or a CIDR"
    )
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise not_a_name from None
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise not_a_name
    if labels[-1].isdigit():
        raise TaskError(f"{fix}: not a valid IP address")
    return f"*.{name}" if host.startswith("*.") else name


def _mode(table: dict[str, Any], where: str) -> NetworkMode | None:
    value = table.get("network_mode")
    if value is None:
        return None
    if value not in NETWORK_MODES:
        choices = ", ".join(f'"{mode}"' for mode in NETWORK_MODES)
        raise TaskError(f"{where} network_mode: expected one of {choices}, got {value!r}")
    return value


def _hosts(table: dict[str, Any], where: str) -> tuple[str, ...] | None:
    value = table.get("allowed_hosts")
    if value is None:
        return None
    if not isinstance(value, list):
        raise TaskError(f'{where} allowed_hosts: expected a list like ["pypi.org", "*.debian.org"], got {value!r}')
    return tuple(dict.fromkeys(host_entry(entry, f"{where} allowed_hosts") for entry in value))


def declared_policy(file: Path, section: str, table: dict[str, Any]) -> NetworkPolicy | None:
    """The policy a table's `network_mode` / `allowed_hosts` declare, or None when it sets neither."""
    where = f"{file}: [{section}]"
    mode, hosts = _mode(table, where), _hosts(table, where)
    if mode is None and not hosts:  # Harbor: an empty list alone declares nothing
        return None
    if hosts and mode not in (None, "allowlist"):
        raise TaskError(
            f'{where} allowed_hosts: only for network_mode = "allowlist" (this table says {mode!r}); '
            'set network_mode = "allowlist" or remove allowed_hosts'
        )
    return NetworkPolicy(mode or "allowlist", hosts or ())


def baseline_policy(file: Path, section: str, table: dict[str, Any]) -> NetworkPolicy:
    """An environment table's policy: `network_mode` (+ hosts), else the deprecated `allow_internet`
    (false -> no-network), else Harbor's public. Both keys given must agree (`allow_internet = false`
    agrees with no-network and allowlist, `true` with public only)."""
    declared = declared_policy(file, section, table)
    allow = table.get("allow_internet")
    if allow is not None and not isinstance(allow, bool):
        raise TaskError(f"{file}: [{section}] allow_internet: expected true or false, got {allow!r}")
    if declared is not None and allow is not None and allow != (declared.mode == "public"):
        raise TaskError(
            f"{file}: [{section}] allow_internet = {str(allow).lower()} contradicts network_mode = "
            f'"{declared.mode}"; remove allow_internet (deprecated in Harbor), network_mode decides'
        )
    if declared is not None:
        return declared
    return NetworkPolicy("no-network") if allow is False else PUBLIC
