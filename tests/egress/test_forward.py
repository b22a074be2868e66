"""Plain-HTTP forward proxying through the real relay: apt-shaped archive files cached on the host, and every
way a client might try to change what a later client gets."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from tests.egress.clients import curl, fetch, raw
from tests.egress.conftest import FakeUpstream, Sandboxed, loopback_policy

DEB = b"!<arch>\ndebian-binary   " + bytes(range(256)) * 64
INDEX = b"Package: curl\nVersion: 8.0\n" * 50


def by_hash(body: bytes) -> str:
    return f"/debian/dists/stable/main/binary-amd64/by-hash/SHA256/{hashlib.sha256(body).hexdigest()}"


def test_second_fetch_is_served_from_the_cache(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    pool = "/debian/pool/main/c/curl/curl_8.0_amd64.deb"
    upstream.put(pool, DEB)
    upstream.put(by_hash(INDEX), INDEX)
    upstream.put("/debian/dists/stable/InRelease", b"signed release\n")
    box = sandbox(loopback_policy())
    for path in (pool, by_hash(INDEX), "/debian/dists/stable/InRelease"):
        first = curl(box.url, "-o", "/dev/null", upstream.url + path)
        second = fetch(box.url, upstream.url + path)
        assert " 200 " in first.stdout and "X-Agentbake-Cache: fill" in first.stdout, first.stdout + first.stderr
        assert second.status == 200 and second.headers["X-Agentbake-Cache"] == "hit"
        assert upstream.hits[path] == 1
    assert fetch(box.url, upstream.url + pool).body == DEB


def test_not_archive_paths_pass_uncached(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    upstream.put("/api/thing", b"dynamic")
    box = sandbox(loopback_policy())
    for _ in range(2):
        assert fetch(box.url, upstream.url + "/api/thing").body == b"dynamic"
    assert upstream.hits["/api/thing"] == 2


def test_a_body_only_the_connection_ends_is_not_kept(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    """Without a length (or chunked framing) a cut body looks whole: it is passed on, never cached, unless the
    path names its digest."""
    pool = "/debian/pool/main/c/cut/cut_1_amd64.deb"
    upstream.put(pool, DEB, **{"X-Close-Delimited": "1"})
    upstream.put(by_hash(INDEX), INDEX, **{"X-Close-Delimited": "1"})
    box = sandbox(loopback_policy())
    for _ in range(2):
        assert fetch(box.url, upstream.url + pool).body == DEB
        assert fetch(box.url, upstream.url + by_hash(INDEX)).body == INDEX
    assert (upstream.hits[pool], upstream.hits[by_hash(INDEX)]) == (2, 1)  # one upstream fetch per request


def test_digest_mismatch_is_never_served_or_kept(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    path = by_hash(INDEX)
    upstream.put(path, b"a tampered index")
    box = sandbox(loopback_policy())
    bad = fetch(box.url, upstream.url + path)
    assert bad.status == 502 and b"does not match its published digest" in bad.body
    upstream.put(path, INDEX)
    good = fetch(box.url, upstream.url + path)
    assert (good.status, good.body, upstream.hits[path]) == (200, INDEX, 2)


def test_range_requests_pass_through_uncached(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    pool = "/debian/pool/main/x/x_1_amd64.deb"

    def partial(handler: object) -> tuple[int, dict[str, str], bytes]:
        if handler.headers.get("Range"):  # type: ignore[attr-defined]
            return 206, {"Content-Range": f"bytes 0-9/{len(DEB)}"}, b"EVILEVILEV"
        return 200, {}, DEB

    upstream.routes[pool] = partial
    box = sandbox(loopback_policy())
    part = fetch(box.url, upstream.url + pool, {"Range": "bytes=0-9"})
    assert part.status == 206 and part.body == b"EVILEVILEV" and "X-Agentbake-Cache" not in part.headers
    whole = fetch(box.url, upstream.url + pool)
    assert whole.body == DEB and whole.headers["X-Agentbake-Cache"] == "fill"
    assert fetch(box.url, upstream.url + pool, {"Range": "bytes=0-9"}).body == b"EVILEVILEV"  # still uncached
    assert fetch(box.url, upstream.url + pool).headers["X-Agentbake-Cache"] == "hit"


def test_client_headers_do_not_shape_a_fill(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    """A fill is made with the proxy's own headers: what the first client sends cannot choose the variant the
    upstream answers with, nor ask for a compressed or partial body, nor skip the cache for others."""
    path = "/debian/dists/stable/InRelease"

    def varying(handler: object) -> tuple[int, dict[str, str], bytes]:
        headers = handler.headers  # type: ignore[attr-defined]
        poisoned = headers.get("Accept-Language") == "evil" or "gzip" in (headers.get("Accept-Encoding") or "")
        return 200, {}, b"EVIL" if poisoned else b"good release"

    upstream.routes[path] = varying
    box = sandbox(loopback_policy())
    sneaky = {
        "Accept-Language": "evil",
        "Accept-Encoding": "gzip",
        "Cache-Control": "no-cache",
        "Pragma": "no-cache",
        "If-None-Match": '"x"',
        "If-Modified-Since": "Thu, 01 Jan 2099 00:00:00 GMT",
    }
    assert fetch(box.url, upstream.url + path, sneaky).body == b"good release"
    assert fetch(box.url, upstream.url + path).body == b"good release"
    assert upstream.hits[path] == 1
    sent = upstream.seen[-1][2]
    assert "Accept-Language" not in sent and sent.get("Accept-Encoding") == "identity"


def test_crafted_paths_never_reach_another_entry(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    good = "/debian/dists/stable/InRelease"
    upstream.put(good, b"the real release")
    box = sandbox(loopback_policy())
    assert fetch(box.url, upstream.url + good).body == b"the real release"
    crafted = [
        "/debian/pool/../dists/stable/InRelease",
        "/debian/dists/stable/./InRelease",
        "/debian/dists%2fstable%2fInRelease",
        "/debian/dists/stable//InRelease",
        "/debian/dists/stable/InRelease?x=1",
    ]
    for path in crafted:
        upstream.put(path, b"EVIL")
        answer = raw(box.port, f"GET {upstream.url}{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert b"EVIL" in answer and b"X-Agentbake-Cache" not in answer, path
        raw(box.port, f"GET {upstream.url}{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert upstream.hits[path] == 2, path  # never cached
    assert fetch(box.url, upstream.url + good).body == b"the real release"
    assert upstream.hits[good] == 1


def test_no_credentials_or_hop_by_hop_headers_forwarded(
    sandbox: Callable[..., Sandboxed], upstream: FakeUpstream
) -> None:
    upstream.put("/echo", b"ok")
    box = sandbox(loopback_policy())
    request = (
        f"GET {upstream.url}/echo HTTP/1.1\r\nHost: elsewhere.example\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
        "Connection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Kept: yes\r\n\r\n"
    )
    assert raw(box.port, request.encode()).startswith(b"HTTP/1.1 200")
    headers = upstream.seen[-1][2]
    names = {name.lower() for name in headers}
    assert names.isdisjoint({"proxy-authorization", "x-hop", "keep-alive", "te"})
    assert headers["Host"] == upstream.url.removeprefix("http://") and headers["X-Kept"] == "yes"


def test_concurrent_clients_make_one_upstream_fetch(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    pool = "/debian/pool/main/b/big/big_1_amd64.deb"
    upstream.put(pool, DEB * 8)
    upstream.delay_s = 0.3
    box = sandbox(loopback_policy())
    bodies: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: bodies.append(fetch(box.url, upstream.url + pool).body)) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert bodies == [DEB * 8] * 8
    assert upstream.hits[pool] == 1


def test_keep_alive_and_pipelining(sandbox: Callable[..., Sandboxed], upstream: FakeUpstream) -> None:
    """apt sends several requests on one connection before reading: each gets its answer, in order."""
    upstream.put("/debian/dists/stable/InRelease", b"one")
    upstream.put("/other", b"two")
    box = sandbox(loopback_policy())
    host = upstream.url.removeprefix("http://")
    both = (
        f"GET {upstream.url}/debian/dists/stable/InRelease HTTP/1.1\r\nHost: {host}\r\n\r\n"
        f"GET {upstream.url}/other HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    answer = raw(box.port, both.encode())
    assert answer.count(b"HTTP/1.1 200") == 2 and answer.index(b"one") < answer.index(b"two")
