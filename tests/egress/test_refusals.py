"""What the proxy refuses, seen from a sandbox's clients, and how refusals are recorded per phase."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

from agentbake.egress import Policy
from tests.egress.clients import curl, fetch, raw
from tests.egress.conftest import FakeUpstream, Sandboxed, loopback_policy


def test_no_network_refuses_everything_with_a_clear_403(
    sandbox: Callable[..., Sandboxed], upstream: FakeUpstream
) -> None:
    upstream.put("/debian/dists/stable/InRelease", b"x")
    box = sandbox(Policy.build("no-network", "agent"))
    for _ in range(2):
        got = fetch(box.url, upstream.url + "/debian/dists/stable/InRelease")
        assert got.status == 403
        assert (
            got.body.decode()
            == "agentbake egress: 127.0.0.1 refused in the agent phase: the agent phase has no network\n"
        )
    tunnel = curl(box.url, "-p", "https://deb.debian.org/")
    assert "403" in tunnel.stderr
    assert upstream.hits["/debian/dists/stable/InRelease"] == 0
    assert box.proxy.refusals()[-1].note == (
        "network: deb.debian.org refused once in the agent phase (the agent phase has no network)"
    )
    refusals = {(r.phase, r.host): r.count for r in box.proxy.refusals()}
    assert refusals == {("agent", "127.0.0.1"): 2, ("agent", "deb.debian.org"): 1}
    log = box.proxy.socket_path.parent / "refusals.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["phase"], line["host"]) for line in lines] == [("agent", "127.0.0.1")] * 2 + [
        ("agent", "deb.debian.org")
    ]


def test_names_outside_the_allowlist_are_refused_before_any_lookup(sandbox: Callable[..., Sandboxed]) -> None:
    """`*.pypi.org` is no `evil-pypi.org` nor `pypi.org.evil.example`; refusals need no DNS (these names are
    never resolved: the answer is immediate even though they do not exist)."""
    box = sandbox(Policy.build("allowlist", "verifier", ["*.pypi.org", "deb.debian.org"]))
    for url in (
        "http://evil-pypi.org/simple/",
        "http://pypi.org.evil.example/",
        "http://pypi.org/",
        "http://DEB.debian.org.evil/",
    ):
        got = fetch(box.url, url)
        assert got.status == 403 and b"not in the verifier phase's allowed_hosts" in got.body, url
    hosts = {r.host for r in box.proxy.refusals()}
    assert hosts == {"evil-pypi.org", "pypi.org.evil.example", "pypi.org", "deb.debian.org.evil"}


def test_a_listed_name_resolving_to_loopback_needs_the_address_listed(
    sandbox: Callable[..., Sandboxed], upstream: FakeUpstream
) -> None:
    """DNS rebinding: the address actually connected to is checked, not just the name."""
    upstream.put("/x", b"reached")
    port = upstream.url.rsplit(":", 1)[1]
    named = sandbox(Policy.build("allowlist", "verifier", ["localhost"]))
    got = fetch(named.url, f"http://localhost:{port}/x")
    assert got.status == 403 and b"127.0.0.1 is a loopback, private or host-local address" in got.body
    public = sandbox(Policy.build("public", "verifier"))
    assert fetch(public.url, f"http://localhost:{port}/x").status == 403
    assert fetch(public.url, f"http://127.0.0.1:{port}/x").status == 403
    assert fetch(public.url, f"http://[::ffff:127.0.0.1]:{port}/x").status == 403
    listed = sandbox(Policy.build("allowlist", "verifier", ["localhost", "127.0.0.1"]))
    assert fetch(listed.url, f"http://localhost:{port}/x").body == b"reached"
    assert upstream.hits["/x"] == 1


def test_connect_by_address_must_be_listed(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    upstream.put("/through", b"tunnelled")
    box = sandbox(Policy.build("allowlist", "agent", ["127.0.0.2"]))
    refused = curl(box.url, "-p", upstream.url + "/through")
    assert "CONNECT tunnel failed, response 403" in refused.stderr
    allowed = sandbox(loopback_policy("agent"))
    through = curl(allowed.url, "-p", upstream.url + "/through")
    assert through.stdout.endswith("tunnelled") and "Connection established" in through.stdout
    assert upstream.hits["/through"] == 1


def test_phase_switch_applies_at_once_and_cuts_open_connections(
    sandbox: Callable[..., Sandboxed], upstream: FakeUpstream
) -> None:
    upstream.put("/x", b"ok")
    box = sandbox(Policy.build("no-network", "agent"))
    assert fetch(box.url, upstream.url + "/x").status == 403
    held = socket.create_connection(("127.0.0.1", box.port))
    held.sendall(f"CONNECT 127.0.0.1:{upstream.url.rsplit(':', 1)[1]} HTTP/1.1\r\n\r\n".encode())
    assert held.recv(100).startswith(b"HTTP/1.1 403")
    held.close()
    idle = socket.create_connection(("127.0.0.1", box.port))
    time.sleep(0.1)
    box.proxy.set_policy(loopback_policy("verifier"))
    idle.settimeout(5)
    assert idle.recv(10) == b""  # the proxy cut the agent-phase connection
    idle.close()
    assert fetch(box.url, upstream.url + "/x").body == b"ok"
    box.proxy.set_policy(Policy.build("allowlist", "verifier", ["pypi.org"]))
    assert fetch(box.url, upstream.url + "/x").status == 403
    assert {(r.phase, r.host, r.count) for r in box.proxy.refusals()} == {
        ("agent", "127.0.0.1", 2),
        ("verifier", "127.0.0.1", 1),
    }


def test_bounds(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.put("/x", b"ok")
    box = sandbox(loopback_policy(), max_connections=2, idle_timeout_s=0.5, max_head_bytes=4096, max_phase_bytes=10_000)
    huge = f"GET {upstream.url}/x HTTP/1.1\r\nX-Big: {'a' * 8000}\r\n\r\n".encode()
    assert raw(box.port, huge).startswith(b"HTTP/1.1 431")
    start = time.monotonic()
    assert raw(box.port, b"GET http://127.0.0.1/ HTTP/1.1\r\n").startswith(b"HTTP/1.1 408")
    assert time.monotonic() - start < 3
    hold = [socket.create_connection(("127.0.0.1", box.port)) for _ in range(2)]
    time.sleep(0.1)
    assert raw(box.port, f"GET {upstream.url}/x HTTP/1.1\r\n\r\n".encode(), timeout=2) == b""  # over the limit
    for conn in hold:
        conn.close()
    time.sleep(0.2)
    assert raw(box.port, b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 404")
    smuggle = f"POST {upstream.url}/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc"
    assert raw(box.port, smuggle.encode()).startswith(b"HTTP/1.1 411")
    upstream.put("/big", b"b" * 20_000)
    fetch(box.url, upstream.url + "/big")
    spent = fetch(box.url, upstream.url + "/x")
    assert spent.status == 403 and b"bytes" in spent.body


def test_tls_through_a_tunnel_and_the_tunnel_cut_at_a_phase_switch(
    sandbox: Callable[..., Sandboxed], tls_upstream: FakeUpstream, tls_cert: tuple[Path, Path]
) -> None:
    """CONNECT carries the client's own TLS end to end (the proxy sees only the name it was given); a tunnel
    the agent left open does not survive into the verifier phase."""
    tls_upstream.put("/secret", b"over tls")
    box = sandbox(loopback_policy("agent"))
    done = curl(box.url, "--cacert", str(tls_cert[0]), tls_upstream.url + "/secret")
    assert done.stdout.endswith("over tls"), done.stderr
    held = socket.create_connection(("127.0.0.1", box.port))
    held.sendall(f"CONNECT {tls_upstream.url.removeprefix('https://')} HTTP/1.1\r\n\r\n".encode())
    assert held.recv(100).startswith(b"HTTP/1.1 200 Connection established")
    box.proxy.set_policy(Policy.build("no-network", "verifier"))
    held.settimeout(5)
    assert held.recv(100) == b""
    held.close()
