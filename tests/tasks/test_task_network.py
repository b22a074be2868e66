"""Network per phase as Harbor resolves it: the environment's baseline, the phases' overrides, the
deprecated allow_internet, and each allowed_hosts entry validated precisely."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbake.errors import TaskError
from agentbake.tasks.task import load_task
from agentbake.tasks.task_network import NetworkPolicy, host_entry
from tests.tasks.test_task import make_task
from tests.tasks.test_task_toml import refused


def policies(tmp_path: Path, toml: str) -> tuple[NetworkPolicy, NetworkPolicy]:
    task = load_task(make_task(tmp_path, toml))
    return task.agent_network, task.verifier_network


@pytest.mark.parametrize(
    ("toml", "agent", "verifier"),
    [
        ("", NetworkPolicy("public"), NetworkPolicy("public")),
        ('[environment]\nnetwork_mode = "no-network"', NetworkPolicy("no-network"), NetworkPolicy("no-network")),
        (
            '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]',
            NetworkPolicy("allowlist", ("pypi.org",)),
            NetworkPolicy("allowlist", ("pypi.org",)),
        ),
        (  # a phase's hosts replace the environment's (Harbor), they are not added to them
            '[environment]\nallowed_hosts = ["pypi.org"]\n[agent]\nallowed_hosts = ["github.com"]',
            NetworkPolicy("allowlist", ("github.com",)),
            NetworkPolicy("allowlist", ("pypi.org",)),
        ),
        (
            '[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"',
            NetworkPolicy("no-network"),
            NetworkPolicy("public"),
        ),
        (
            '[agent]\nnetwork_mode = "no-network"\n'
            '[verifier]\nallowed_hosts = ["deb.debian.org", "*.pythonhosted.org"]',
            NetworkPolicy("no-network"),
            NetworkPolicy("allowlist", ("deb.debian.org", "*.pythonhosted.org")),
        ),
        ('[agent]\nnetwork_mode = "allowlist"', NetworkPolicy("allowlist"), NetworkPolicy("public")),  # nothing
        ("[agent]\nallowed_hosts = []", NetworkPolicy("public"), NetworkPolicy("public")),  # declares nothing
        ("[environment]\nallow_internet = false", NetworkPolicy("no-network"), NetworkPolicy("no-network")),
        (
            '[environment]\nallow_internet = false\nnetwork_mode = "no-network"',
            NetworkPolicy("no-network"),
            NetworkPolicy("no-network"),
        ),
        (
            '[environment]\nallow_internet = false\nallowed_hosts = ["pypi.org"]',
            NetworkPolicy("allowlist", ("pypi.org",)),
            NetworkPolicy("allowlist", ("pypi.org",)),
        ),
        ('[environment]\nallow_internet = true\nnetwork_mode = "public"', NetworkPolicy(), NetworkPolicy()),
    ],
)
def test_phase_policies_resolve_as_harbor_does(
    tmp_path: Path, toml: str, agent: NetworkPolicy, verifier: NetworkPolicy
) -> None:
    assert policies(tmp_path, toml) == (agent, verifier)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[environment]\nnetwork_mode = "open"', '[environment] network_mode: expected one of "no-network", "public"'),
        ('[agent]\nnetwork_mode = "none"', "[agent] network_mode: expected one of"),
        ("[verifier]\nallowed_hosts = 'pypi.org'", '[verifier] allowed_hosts: expected a list like ["pypi.org"'),
        (
            '[agent]\nnetwork_mode = "public"\nallowed_hosts = ["pypi.org"]',
            "[agent] allowed_hosts: only for network_mode = \"allowlist\" (this table says 'public'); set",
        ),
        (
            '[environment]\nallow_internet = true\nnetwork_mode = "no-network"',
            '[environment] allow_internet = true contradicts network_mode = "no-network"; remove allow_internet',
        ),
        ('[environment]\nallow_internet = false\nnetwork_mode = "public"', "allow_internet = false contradicts"),
        (
            '[environment]\nallow_internet = true\nallowed_hosts = ["pypi.org"]',
            'allow_internet = true contradicts network_mode = "allowlist"',
        ),
        ("[verifier]\nallowed_hosts = [3]", "[verifier] allowed_hosts: expected host names as strings"),
    ],
)
def test_bad_network_keys_are_refused(tmp_path: Path, toml: str, expected: str) -> None:
    assert expected in refused(tmp_path, toml)


@pytest.mark.parametrize(
    ("entry", "normalized"),
    [
        ("PyPI.org.", "pypi.org"),
        (" files.pythonhosted.org ", "files.pythonhosted.org"),
        ("*.Debian.org", "*.debian.org"),
        ("localhost", "localhost"),
        ("10.1.2.3", "10.1.2.3"),
        ("2001:DB8::1", "2001:db8::1"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("2001:db8::/32", "2001:db8::/32"),
        ("bücher.example", "xn--bcher-kva.example"),
    ],
)
def test_allowed_host_entries_are_normalized(entry: str, normalized: str) -> None:
    assert host_entry(entry, "f: [agent] allowed_hosts") == normalized


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("https://pypi.org/simple", "a URL; write the host name only, e.g. 'pypi.org'"),
        ("pypi.org:443", "a port; ports are not part of an allowed host, write 'pypi.org'"),
        ("[2001:db8::1]:443", "write an IPv6 address without brackets or port, e.g. '2001:db8::1'"),
        ("pypi.org/simple", "a path or a bad CIDR; an entry names a host only, e.g. 'pypi.org'"),
        ("10.0.0.1/8", "host bits set in a CIDR; write the network, '10.0.0.0/8'"),
        ("10.0.0.0/33", "a path or a bad CIDR"),
        ("bü..x", "not a host name"),
        ("*", 'every host; write network_mode = "public" instead'),
        ("", "an empty host; remove it"),
        ("a..b", "not a host name"),
        ("-bad.org", "not a host name"),
        ("under_score.org", "not a host name"),
        ("*.*.org", "not a host name"),
        ("foo*.org", "not a host name"),
        ("999.1.1.1", "not a valid IP address"),
        ("a" * 64 + ".org", "not a host name"),
    ],
)
def test_bad_allowed_host_entries_say_what_they_are_and_the_fix(entry: str, expected: str) -> None:
    with pytest.raises(TaskError) as info:
        host_entry(entry, "f: [agent] allowed_hosts")
    assert str(info.value).startswith(f"f: [agent] allowed_hosts: {entry!r}: {expected}")


def test_duplicate_hosts_are_kept_once_in_order(tmp_path: Path) -> None:
    agent, _ = policies(tmp_path, '[agent]\nallowed_hosts = ["b.org", "a.org", "B.org."]')
    assert agent.allowed_hosts == ("b.org", "a.org")
