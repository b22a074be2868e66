"""Harbor's network keys as policies: parsing, name matching, and which addresses a policy lets the proxy reach."""

from __future__ import annotations

import ipaddress

import pytest

from agentbake.egress import Allowlist, Policy
from agentbake.egress.allowlist import host_networks
from agentbake.errors import ConfigError


def test_entries_of_every_form() -> None:
    allow = Allowlist.parse(
        ["PyPI.org.", "*.pythonhosted.org", "192.0.2.7", "2001:db8::/32", "[2001:db8::1]", "10.1.0.0/16"]
    )
    assert allow.names == {"pypi.org"} and allow.suffixes == (".pythonhosted.org",)
    assert [str(n) for n in allow.networks] == ["192.0.2.7/32", "2001:db8::/32", "2001:db8::1/128", "10.1.0.0/16"]


@pytest.mark.parametrize(
    "entry",
    [
        "https://pypi.org",
        "pypi.org:443",
        "*",
        "a*.pypi.org",
        "*.*.org",
        "pypi.org/simple",
        "",
        "ex ample.com",
        "10.0.0.0/33",
    ],
)
def test_bad_entries_say_which_and_what_is_expected(entry: str) -> None:
    with pytest.raises(ConfigError) as error:
        Policy.build("allowlist", "verifier", [entry], where="task.toml [verifier]")
    assert f"task.toml [verifier] allowed_hosts: {entry!r} is not a host" in str(error.value)
    assert "*.pypi.org" in str(error.value)


def test_modes_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"network_mode: 'internet' is not one of no-network, public, allowlist"):
        Policy.build("internet", "agent")
    with pytest.raises(ConfigError, match='only used with network_mode = "allowlist"'):
        Policy.build("public", "agent", ["pypi.org"])


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("files.pypi.org", True),
        ("A.B.PYPI.ORG.", True),
        ("pypi.org", False),
        ("evil-pypi.org", False),
        ("pypi.org.evil.example", False),
        ("xpypi.org", False),
        ("deb.debian.org", True),
        ("sub.deb.debian.org", False),
        ("deb..debian.org", False),
        ("-bad.debian.org", False),
    ],
)
def test_names_match_as_given(host: str, allowed: bool) -> None:
    policy = Policy.build("allowlist", "verifier", ["*.pypi.org", "deb.debian.org"])
    assert (policy.check_host(host) is None) is allowed


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.8.9.10", "::1", "169.254.169.254", "fe80::1", "10.0.0.1", "172.17.0.1", "192.168.1.1",
     "100.64.0.1", "0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255", "fd00::2", "::ffff:127.0.0.1"],
)  # fmt: skip
def test_host_local_addresses_need_listing(address: str) -> None:
    for policy in (Policy.build("public", "verifier"), Policy.build("allowlist", "verifier", ["example.org"])):
        assert policy.check_host(address) is not None
    listed = Policy.build("allowlist", "verifier", [address.removeprefix("::ffff:")])
    assert listed.check_host(address) is None


def test_public_mode_and_address_literals() -> None:
    public = Policy.build("public", "verifier")
    assert public.check_host("203.0.113.80") is None and public.check_host("any.example") is None
    allow = Policy.build("allowlist", "verifier", ["example.org", "198.51.100.0/24"])
    assert allow.check_host("198.51.100.9") is None
    assert "not in the verifier phase's allowed_hosts" in (allow.check_host("203.0.113.80") or "")
    # a listed name may resolve to any address outside the forbidden ranges
    assert allow.check_address(ipaddress.ip_address("203.0.113.80")) is None
    assert allow.check_address(ipaddress.ip_address("127.0.0.1")) is not None


def test_no_network_refuses_all() -> None:
    policy = Policy.build("no-network", "agent")
    assert policy.check_host("pypi.org") == "the agent phase has no network"
    assert policy.check_address(ipaddress.ip_address("203.0.113.80")) is not None


def test_this_hosts_own_networks_are_known() -> None:
    assert any(ipaddress.ip_address("127.0.0.1") not in net for net in host_networks()) or host_networks() == ()
    loopback = [net for net in host_networks() if ipaddress.ip_address("::1") in net]
    assert loopback, "the host's IPv6 loopback comes from /proc/net/if_inet6"
