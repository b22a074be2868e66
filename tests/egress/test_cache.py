"""The cache on its own: atomic, checked commits; LRU pruning; one fill for concurrent callers; archive rules."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from agentbake.egress.cache import Cache, DigestMismatch, Expected
from agentbake.egress.rules import archive_rule


def put(cache: Cache, key: str, body: bytes, *, ttl: float | None = None, expected: Expected | None = None) -> None:
    writer = cache.writer(expected)
    writer.write(body)
    cache.commit(key, writer, content_type="application/octet-stream", ttl_s=ttl)


def read(cache: Cache, key: str) -> bytes | None:
    hit = cache.open(key)
    if hit is None:
        return None
    with hit[1] as blob:
        return blob.read()


def test_commit_is_checked_private_and_content_addressed(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c", 10**6)
    good = Expected("sha512", hashlib.sha512(b"body").digest())
    put(cache, "a", b"body", expected=good)
    put(cache, "b", b"body")
    assert read(cache, "a") == read(cache, "b") == b"body"
    assert cache.info().blobs == 1 and cache.info().entries == 2
    with pytest.raises(DigestMismatch):
        put(cache, "c", b"tampered", expected=good)
    assert read(cache, "c") is None and list((tmp_path / "c" / "tmp").iterdir()) == []
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700
    blob = next((tmp_path / "c" / "blobs").glob("*/*"))
    assert stat.S_IMODE(blob.stat().st_mode) == 0o600 and blob.stat().st_uid == os.getuid()
    assert blob.name == hashlib.sha256(b"body").hexdigest()


def test_expiry_and_a_corrupted_blob_are_misses(tmp_path: Path) -> None:
    cache = Cache(tmp_path, 10**6)
    put(cache, "index", b"v1", ttl=60)
    assert cache.open("index", now=time.time() + 61) is None
    put(cache, "deb", b"whole file")
    name = hashlib.sha256(b"whole file").hexdigest()
    (tmp_path / "blobs" / name[:2] / name).write_bytes(b"cut")
    assert read(cache, "deb") is None


def test_prune_evicts_least_recently_used(tmp_path: Path) -> None:
    cache = Cache(tmp_path, 10**6)
    for index, key in enumerate(("old", "mid", "new")):
        put(cache, key, key.encode() * 100)
        entry = next(p for p in (tmp_path / "entries").glob("*/*.json") if f'"{key}"' in p.read_text())
        os.utime(entry, (1000 + index, 1000 + index))
    read(cache, "old")  # used now: the most recent
    report = cache.prune(350)
    assert (report.entries_removed, report.blobs_removed, report.bytes_kept) == (2, 2, 300)
    assert read(cache, "old") is not None and read(cache, "mid") is None and read(cache, "new") is None
    (tmp_path / "blobs" / "zz").mkdir()
    (tmp_path / "blobs" / "zz" / "orphan").write_bytes(b"x")
    assert cache.prune().blobs_removed == 1
    assert cache.prune(0).bytes_kept == 0 and cache.info().entries == 0


def test_a_fill_past_the_bound_prunes(tmp_path: Path) -> None:
    cache = Cache(tmp_path, 1000)
    put(cache, "first", b"a" * 600)
    put(cache, "second", b"b" * 600)
    assert read(cache, "first") is None and read(cache, "second") == b"b" * 600


def test_single_flight_runs_once_for_concurrent_callers(tmp_path: Path) -> None:
    cache = Cache(tmp_path, 10**6)
    calls = 0

    async def produce() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return "filled"

    async def main() -> list[str]:
        waiting = [asyncio.create_task(cache.single_flight("k", produce)) for _ in range(10)]
        await asyncio.sleep(0.01)
        waiting[0].cancel()  # one caller leaving does not cancel the fill for the others
        results = await asyncio.gather(*waiting[1:])
        return [*results, await cache.single_flight("k", produce)]

    assert asyncio.run(main()) == ["filled"] * 10 and calls == 2


def test_subresource_integrity() -> None:
    sha512 = hashlib.sha512(b"x").digest()
    found = Expected.from_sri(
        f"sha1-{base64.b64encode(hashlib.sha1(b'x').digest()).decode()} sha512-{base64.b64encode(sha512).decode()}"
    )
    assert found == Expected("sha512", sha512)
    assert Expected.from_sri("md5-AAAA") is None and Expected.from_sri("sha512-not base64!") is None


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("/debian/dists/bookworm/InRelease", "ttl"),
        ("/debian/dists/bookworm/main/binary-amd64/Packages.xz", "ttl"),
        ("/ubuntu/dists/noble-updates/main/i18n/Translation-en.gz", "ttl"),
        ("/debian/pool/main/c/curl/curl_7.88.1-10_amd64.deb", "forever"),
        (f"/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/{'a' * 64}", "digest"),
        (f"/debian/dists/bookworm/main/binary-amd64/by-hash/MD5Sum/{'a' * 32}", None),
        ("/debian/pool/../dists/bookworm/InRelease", None),
        ("/debian/dists/bookworm/./InRelease", None),
        ("/debian/dists/bookworm%2fInRelease", None),
        ("/debian//dists/bookworm/InRelease", None),
        ("/debian/dists/bookworm/InRelease?x", None),
        ("/debian/pool/main/c/curl/.hidden.deb", None),
        ("/index.html", None),
    ],
)
def test_archive_rules(path: str, kept: str | None) -> None:
    rule = archive_rule(path, 600)
    if kept is None:
        assert rule is None
    else:
        assert rule is not None
        assert {
            "ttl": rule.ttl_s == 600,
            "forever": rule.ttl_s is None and rule.expected is None,
            "digest": rule.expected is not None,
        }[kept]
