"""The proxy seen from a real sandbox on the engine: a container with no network (as the Docker backend makes
them: `network_mode="none"`, capabilities dropped, its host folder bind-mounted read-only, the relay as its main
process) reaches only what the phase's policy allows, and only through the proxy."""

from __future__ import annotations

import contextlib
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.egress import EgressConfig, EgressService, Policy, ProxyHandle, sandbox_env
from tests.egress.conftest import FORWARDER, FakeUpstream, serve_fake

pytestmark = pytest.mark.docker
MOUNT = "/run/agentbake"
PORT = 3128
FETCH = """
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode())
except OSError as error:
    print("unreachable", error)
"""


class Box:
    """One sandbox container and its proxy."""

    def __init__(self, engine: docker.DockerClient, image: str, proxy: ProxyHandle, config: EgressConfig) -> None:
        self.proxy = proxy
        self.config = config
        info = engine.images.get(image)
        self.python = info.labels["dev.agentbake.python"]
        self.container = engine.containers.run(
            image,
            [self.python, "-I", "-S", f"{MOUNT}/forwarder.py", str(PORT), f"{MOUNT}/egress.sock"],
            detach=True,
            user="root",
            init=True,
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"],
            security_opt=["no-new-privileges"],
            volumes={str(proxy.socket_path.parent): {"bind": MOUNT, "mode": "ro"}},
            labels={"dev.agentbake.test": "egress"},
        )

    def run(self, argv: list[str], *, user: str = "agent", proxied: bool = True) -> str:
        env = sandbox_env(PORT, self.proxy.policy, self.config) if proxied else {}
        _, output = self.container.exec_run(argv, user=user, environment=env)
        return output.decode(errors="replace")

    def fetch(self, url: str, **options: Any) -> str:
        return self.run([self.python, "-I", "-c", FETCH, url], **options).strip()


@pytest.fixture
def boxes(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], tmp_path: Path
) -> Iterator[Callable[..., Box]]:
    """`boxes(policy)`: a sandbox container and its proxy; every proxy of a test shares one service (one cache)."""
    made: list[Box] = []
    service = EgressService(EgressConfig(cache_dir=tmp_path / "cache"))
    image = built_images["claude-code"].tag

    def make(policy: Policy) -> Box:
        folder = tmp_path / f"box{len(made)}"
        folder.mkdir()
        shutil.copy(FORWARDER, folder / "forwarder.py")
        box = Box(engine, image, service.start_proxy(folder, policy), service.config)
        made.append(box)
        deadline = time.monotonic() + 20
        while "relay up" not in box.run([box.python, "-I", "-c", RELAY_UP], proxied=False):
            assert time.monotonic() < deadline, "the relay did not listen"
            time.sleep(0.1)
        return box

    yield make
    for box in made:
        with contextlib.suppress(docker.errors.DockerException):
            box.container.remove(force=True)
    service.close()


RELAY_UP = f"import socket; socket.create_connection(('127.0.0.1', {PORT}), timeout=1); print('relay up')"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    """On 127.0.0.2: loopback on the host, but not the sandbox's `no_proxy` (which keeps 127.0.0.1 direct)."""
    with serve_fake(host="127.0.0.2") as fake:
        yield fake


def test_each_phase_reaches_what_it_allows(boxes: Callable[..., Box], upstream: FakeUpstream) -> None:
    upstream.put("/debian/dists/stable/InRelease", b"release")
    url = upstream.url + "/debian/dists/stable/InRelease"
    box = boxes(Policy.build("no-network", "agent"))
    assert (
        box.fetch(url) == "403 agentbake egress: 127.0.0.2 refused in the agent phase: the agent phase has no network"
    )
    assert box.fetch(url, proxied=False).startswith("unreachable")  # the host's loopback is not the sandbox's
    assert box.fetch("http://203.0.113.80/", proxied=False).startswith("unreachable")  # no route at all
    box.proxy.set_policy(Policy.build("allowlist", "verifier", ["127.0.0.2"]))
    assert box.fetch(url, user="root") == "200 release"
    assert box.fetch("https://pypi.org/simple/").startswith("unreachable")  # CONNECT refused: not listed
    assert upstream.hits["/debian/dists/stable/InRelease"] == 1
    assert {(r.phase, r.host) for r in box.proxy.refusals()} == {("agent", "127.0.0.2"), ("verifier", "pypi.org")}


def test_apt_get_update_in_two_sandboxes_shares_the_cache(boxes: Callable[..., Box]) -> None:
    try:
        socket.getaddrinfo("deb.debian.org", 80)
    except OSError:
        pytest.skip("deb.debian.org does not resolve here")
    policy = Policy.build("allowlist", "verifier", ["deb.debian.org"])
    first = boxes(policy)
    sources = "deb http://deb.debian.org/debian bookworm-updates main"
    update = [
        "sh",
        "-c",
        f"echo '{sources}' > /etc/apt/sources.list && rm -f /etc/apt/sources.list.d/* && apt-get update",
    ]
    assert "Reading package lists" in first.run(update, user="root")
    second = boxes(policy)
    output = second.run(update, user="root")
    assert "Reading package lists" in output and "Err" not in output, output
    assert second.proxy.stats().hits >= 2
