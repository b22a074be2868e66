"""Upstream failures: a host the policy allows that cannot be reached (or breaks off its answer) is answered 502/504
as before, and counted per (phase, host) with a short cause, next to the refusals. Only loopback is reached; the
one name looked up is under `.invalid`, answered by a resolver that fails it without asking any DNS server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from agentbake.egress import Policy
from agentbake.egress.upstream import connect_failure
from tests.egress.clients import fetch, raw
from tests.egress.conftest import FakeUpstream, Sandboxed, loopback_policy, refusing_port


def failures(box: Sandboxed) -> set[tuple[str, str, str, int]]:
    return {(f.phase, f.host, f.reason, f.count) for f in box.proxy.failures()}


def log_lines(box: Sandboxed) -> list[dict[str, object]]:
    log = box.proxy.socket_path.parent / "refusals.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def broken() -> Iterator[str]:
    """A loopback upstream that misbehaves as its request's path says: `/silent` is never answered, `/close` is
    closed unanswered, `/cut` gets 10 bytes of 100; a TLS handshake gets a plain HTTP answer. Yields host:port."""
    server = socket.create_server(("127.0.0.2", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            data = conn.recv(65536)
            if data.startswith(b"\x16"):  # a TLS ClientHello
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            elif b" /silent " in data:
                conn.recv(1)  # until the proxy gives up
            elif b" /cut " in data:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.2:{server.getsockname()[1]}"
    server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
    server.close()


@pytest.fixture
def closed() -> Iterator[int]:
    with refusing_port() as port:
        yield port


def test_a_refused_connect_is_counted_for_gets_fills_and_tunnels(
    sandbox: Callable[..., Sandboxed], closed: int
) -> None:
    box = sandbox(loopback_policy())
    assert fetch(box.url, "http://pypi.org/").status == 403  # a refusal, for the log's sake
    # a plain GET, a cache fill (an archive path), a CONNECT tunnel: each answered 502 as before
    assert fetch(box.url, f"http://127.0.0.1:{closed}/x").status == 502
    filled = fetch(box.url, f"http://127.0.0.1:{closed}/debian/dists/stable/InRelease")
    assert filled.status == 502 and b"cannot connect to 127.0.0.1" in filled.body
    assert raw(box.port, f"CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 502")
    assert failures(box) == {("verifier", "127.0.0.1", "connection refused", 3)}
    assert box.proxy.failures()[0].note == (
        "network: 127.0.0.1 failed 3 times in the verifier phase (connection refused)"
    )
    assert [r.host for r in box.proxy.refusals()] == ["pypi.org"]
    assert [(line["kind"], line["host"]) for line in log_lines(box)] == [
        ("refusal", "pypi.org"),
        *[("failure", "127.0.0.1")] * 3,
    ]


def test_an_answer_closed_or_cut(sandbox: Callable[..., Sandboxed], broken: str) -> None:
    box = sandbox(loopback_policy("agent", "127.0.0.2"))
    assert fetch(box.url, f"http://{broken}/close").status == 502
    cut = raw(box.port, f"GET http://{broken}/cut HTTP/1.1\r\n\r\n".encode())
    assert cut.startswith(b"HTTP/1.1 200") and cut.endswith(b"x" * 10)  # the client sees the cut
    assert failures(box) == {("agent", "127.0.0.2", "upstream closed the connection", 2)}


def test_silence_and_a_full_backlog(sandbox: Callable[..., Sandboxed], broken: str) -> None:
    box = sandbox(loopback_policy("verifier", "127.0.0.2"), upstream_timeout_s=0.5)
    assert fetch(box.url, f"http://{broken}/silent").status == 504
    # a listener whose accept queue is full drops the SYN: the connect times out
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        port = full.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # fills the queue
            assert fetch(box.url, f"http://127.0.0.1:{port}/x").status == 502
    assert failures(box) == {
        ("verifier", "127.0.0.2", "no answer in 0.5 s", 1),
        ("verifier", "127.0.0.1", "connect timed out", 1),
    }


def test_a_failed_tls_handshake_of_a_mirror_fill(
    sandbox: Callable[..., Sandboxed], broken: str, tls_upstream: FakeUpstream
) -> None:
    """The proxy does TLS only for its mirror routes (a CONNECT tunnel carries the client's own): a plain server,
    and one whose certificate the proxy does not trust."""
    policy = loopback_policy("verifier", "127.0.0.2")
    upstreams = {"pypi_index": f"https://{broken}/simple", "pypi_files": f"https://{broken}"}
    box = sandbox(policy, **upstreams, npm_registry=tls_upstream.url)
    assert fetch(box.url, f"{box.url}/pypi/simple/demo/").status == 502
    assert fetch(box.url, f"{box.url}/npm/left-pad").status == 502
    reasons = {f.host: f.reason for f in box.proxy.failures()}
    assert reasons["127.0.0.2"].startswith("TLS handshake failed: "), reasons
    assert reasons["127.0.0.1"] == "TLS handshake failed: self-signed certificate"


def test_a_name_that_does_not_resolve_and_the_bound(
    sandbox: Callable[..., Sandboxed], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `max_logged_refusals` hosts of a phase, failures are counted together and no longer logged."""
    real = socket.getaddrinfo

    def resolve(host: object, *args: object, **kwargs: object) -> object:
        if isinstance(host, str) and host.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    box = sandbox(Policy.build("public", "verifier"), max_logged_refusals=1)
    for name in ("pkgs.invalid", "more.invalid", "other.invalid"):
        got = fetch(box.url, f"http://{name}/simple/")
        assert got.status == 502 and f"cannot resolve {name}".encode() in got.body
    assert failures(box) == {
        ("verifier", "pkgs.invalid", "name did not resolve", 1),
        ("verifier", "(other hosts)", "name did not resolve", 2),
    }
    assert [line["host"] for line in log_lines(box)] == ["pkgs.invalid"]


def test_causes_of_a_failed_connect() -> None:
    assert connect_failure(TimeoutError()) == "connect timed out"
    assert connect_failure(OSError(101, "Network is unreachable")) == "network is unreachable"
