"""The one test that leaves this machine: the real `apt-get update` against Debian's mirror (a small suite)
through the proxy, twice; the second is served from the cache. Skipped where the mirror cannot be resolved."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbake.egress import Policy
from tests.egress.clients import clean_env
from tests.egress.conftest import Sandboxed

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
SOURCE = f"deb [signed-by={KEYRING}] http://deb.debian.org/debian bookworm-updates main\n"


def apt_update(root: Path, box: Sandboxed) -> subprocess.CompletedProcess[str]:
    for folder in ("state/lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/apt.conf.d"):
        (root / folder).mkdir(parents=True)
    (root / "state" / "status").write_text("")
    (root / "etc" / "sources.list").write_text(SOURCE)
    options = {
        "Dir::State": root / "state",
        "Dir::State::status": root / "state" / "status",
        "Dir::Cache": root / "cache",
        "Dir::Etc": root / "etc",
        "Acquire::http::Proxy": box.url,
        "Debug::NoLocking": 1,
        "APT::Sandbox::User": "root",
    }
    argv = ["apt-get", *(f"-o{key}={value}" for key, value in options.items()), "update"]
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=120)


def test_apt_update_twice_through_the_proxy(sandbox: Callable[..., Sandboxed], tmp_path: Path) -> None:
    if shutil.which("apt-get") is None or not KEYRING.is_file():
        pytest.skip("needs apt-get and Debian's archive keyring")
    try:
        socket.getaddrinfo("deb.debian.org", 80)
    except OSError:
        pytest.skip("deb.debian.org does not resolve here")
    box = sandbox(Policy.build("allowlist", "verifier", ["deb.debian.org"]))
    first = apt_update(tmp_path / "first", box)
    assert first.returncode == 0, first.stdout + first.stderr
    proxy = box.proxy
    assert proxy.stats().hits == 0
    second = apt_update(tmp_path / "second", box)
    assert second.returncode == 0, second.stdout + second.stderr
    assert proxy.stats().hits >= 2  # InRelease and Packages
    assert proxy.refusals() == []
