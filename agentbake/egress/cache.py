"""The host-side pull-through cache: URL-keyed entries over content-addressed blobs, filled only by the proxy.

    <root>/entries/ab/<sha256 of the key>.json   {key, blob, size, content_type, stored_at, expires_at, headers}
    <root>/blobs/cd/<sha256 of the content>      the bytes, exactly as the upstream sent them
    <root>/tmp/                                  fills in progress (renamed into place once whole and checked)

No sandbox can write here: the folder is this user's (0700) and never mounted. Every byte came from a whole 200 the
proxy fetched itself, checked against a published digest when there is one. An entry's mtime is its last use, for
`prune`. Concurrent fills of one key make one upstream fetch.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

T = TypeVar("T")
_TMP_STALE_S = 3600
_DIGESTS = ("sha256", "sha512", "sha384", "sha1")


class DigestMismatch(Exception):
    """A filled body does not match the digest its registry published: it is dropped, never served."""


@dataclass(frozen=True)
class Expected:
    """A digest a registry published for a file (PyPI's `#sha256=`, npm's `dist.integrity`, a by-hash path)."""

    algorithm: str
    digest: bytes

    @classmethod
    def from_hex(cls, algorithm: str, digest: str) -> Expected | None:
        algorithm = algorithm.lower()
        try:
            return cls(algorithm, bytes.fromhex(digest)) if algorithm in _DIGESTS else None
        except ValueError:
            return None

    @classmethod
    def from_sri(cls, integrity: str) -> Expected | None:
        """The strongest digest of a Subresource Integrity string (`sha512-<base64>`, several space-separated)."""
        best: Expected | None = None
        for item in integrity.split():
            algorithm, _, value = item.partition("-")
            try:
                candidate = cls(algorithm.lower(), base64.b64decode(value, validate=True))
            except ValueError:
                continue
            if candidate.algorithm in _DIGESTS and (
                best is None or _DIGESTS.index(candidate.algorithm) < _DIGESTS.index(best.algorithm)
            ):
                best = candidate
        return best


@dataclass(frozen=True)
class Entry:
    key: str
    blob: str
    size: int
    content_type: str
    stored_at: float
    expires_at: float | None
    headers: dict[str, str] = field(default_factory=dict)
    """Validators worth handing back (Last-Modified, ETag)."""


@dataclass(frozen=True)
class CacheInfo:
    root: Path
    entries: int
    blobs: int
    bytes: int
    max_bytes: int


@dataclass(frozen=True)
class PruneReport:
    entries_removed: int
    blobs_removed: int
    bytes_freed: int
    bytes_kept: int


def _digest_name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class BlobWriter:
    """A fill in progress: a private temp file, hashed as it is written."""

    def __init__(self, cache: Cache, expected: Expected | None) -> None:
        fd, name = tempfile.mkstemp(dir=cache.root / "tmp")
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self.path = Path(name)
        self.size = 0
        self._sha256 = hashlib.sha256()
        self._expected = expected
        self._check = hashlib.new(expected.algorithm) if expected and expected.algorithm != "sha256" else None

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._sha256.update(data)
        if self._check is not None:
            self._check.update(data)
        self.size += len(data)

    def finish(self) -> str:
        """Close the file and return its sha256; DigestMismatch when it is not what the registry published."""
        self._file.close()
        sha256 = self._sha256.digest()
        if self._expected is not None:
            got = self._check.digest() if self._check is not None else sha256
            if got != self._expected.digest:
                self.abort()
                raise DigestMismatch(
                    f"{self._expected.algorithm} {got.hex()} != published {self._expected.digest.hex()}"
                )
        return sha256.hex()

    def abort(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class Cache:
    """See the module docstring. `max_bytes` bounds the blobs' total size; a fill past it prunes to 90 %."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        for sub in ("entries", "blobs", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
        self._inflight: dict[str, asyncio.Future[Any]] = {}
        self._bytes = sum(path.stat().st_size for path in self._blob_files())
        self.fills = 0
        """Entries committed by this object (the proxies count their hits)."""

    def _entry_path(self, key: str) -> Path:
        name = _digest_name(key)
        return self.root / "entries" / name[:2] / f"{name}.json"

    def _blob_path(self, blob: str) -> Path:
        return self.root / "blobs" / blob[:2] / blob

    def _blob_files(self) -> list[Path]:
        return [path for path in (self.root / "blobs").glob("*/*") if path.is_file()]

    def open(self, key: str, *, now: float | None = None) -> tuple[Entry, BinaryIO] | None:
        """The fresh entry of `key` and its blob opened for reading (an eviction meanwhile cannot cut it short),
        or None. A hit marks the entry used."""
        path = self._entry_path(key)
        try:
            entry = Entry(**json.loads(path.read_text()))
            if entry.key != key or (entry.expires_at is not None and entry.expires_at <= (now or time.time())):
                return None
            blob = self._blob_path(entry.blob).open("rb")
        except (OSError, ValueError, TypeError):
            return None
        if os.fstat(blob.fileno()).st_size != entry.size:
            blob.close()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        return entry, blob

    def writer(self, expected: Expected | None = None) -> BlobWriter:
        return BlobWriter(self, expected)

    def commit(
        self,
        key: str,
        writer: BlobWriter,
        *,
        content_type: str,
        ttl_s: float | None,
        headers: dict[str, str] | None = None,
    ) -> Entry:
        """Move a whole, checked fill into place (rename, so readers see all of it or nothing) and record it."""
        blob = writer.finish()
        target = self._blob_path(blob)
        target.parent.mkdir(exist_ok=True, mode=0o700)
        if target.exists():
            writer.path.unlink(missing_ok=True)
        else:
            os.replace(writer.path, target)
            self._bytes += writer.size
        now = time.time()
        entry = Entry(key, blob, writer.size, content_type, now, None if ttl_s is None else now + ttl_s, headers or {})
        path = self._entry_path(key)
        path.parent.mkdir(exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(entry), out)
        os.replace(tmp, path)
        self.fills += 1
        if self._bytes > self.max_bytes:
            self.prune(int(self.max_bytes * 0.9))
        return entry

    async def single_flight(self, key: str, produce: Callable[[], Awaitable[T]]) -> T:
        """Run `produce` once for concurrent callers of one key; every caller gets its result (or its error).
        The work is shielded: a caller that goes away does not cancel it for the others."""
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(produce())
            self._inflight[key] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key, None))
        return await asyncio.shield(pending)

    def info(self) -> CacheInfo:
        entries = sum(1 for _ in (self.root / "entries").glob("*/*.json"))
        blobs = self._blob_files()
        return CacheInfo(self.root, entries, len(blobs), sum(path.stat().st_size for path in blobs), self.max_bytes)

    def prune(self, max_bytes: int | None = None, *, now: float | None = None) -> PruneReport:
        """Drop expired entries, then the least recently used until the blobs fit `max_bytes` (0 empties), then unnamed
        blobs and stale temp files."""
        now = now or time.time()
        limit = self.max_bytes if max_bytes is None else max_bytes
        live: list[tuple[float, Path, Entry]] = []
        removed = 0
        for path in (self.root / "entries").glob("*/*.json"):
            try:
                entry = Entry(**json.loads(path.read_text()))
                used = path.stat().st_mtime
            except (OSError, ValueError, TypeError):
                entry, used = None, 0.0
            if entry is None or (entry.expires_at is not None and entry.expires_at <= now):
                path.unlink(missing_ok=True)
                removed += 1
            else:
                live.append((used, path, entry))
        live.sort(key=lambda item: item[0])
        sizes: dict[str, int] = {}
        for _, _, entry in live:
            sizes[entry.blob] = entry.size
        referenced = dict.fromkeys(sizes, 0)
        for _, _, entry in live:
            referenced[entry.blob] += 1
        total = sum(sizes.values())
        for _, path, entry in live:
            if total <= limit:
                break
            path.unlink(missing_ok=True)
            removed += 1
            referenced[entry.blob] -= 1
            if referenced[entry.blob] == 0:
                total -= sizes[entry.blob]
        keep = {blob for blob, count in referenced.items() if count > 0}
        blobs_removed = freed = 0
        for blob_path in self._blob_files():
            if blob_path.name not in keep:
                freed += blob_path.stat().st_size
                blob_path.unlink(missing_ok=True)
                blobs_removed += 1
        for tmp in (self.root / "tmp").iterdir():
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime > _TMP_STALE_S:
                    tmp.unlink()
        self._bytes = sum(path.stat().st_size for path in self._blob_files())
        return PruneReport(removed, blobs_removed, freed, self._bytes)
