"""Which plain-HTTP answers the cache keeps, for how long, and checked against what.

Only Debian/Ubuntu archive paths: by-hash and pool files (kept for good), and suite indexes (kept `index_ttl_s`).
Anything else passes uncached. A path must be plain (no query, escapes, `.` or `..`), so one file has one entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentbake.egress.cache import Expected

_SEGMENT = re.compile(r"^[A-Za-z0-9_~+:@=,-][A-Za-z0-9._~+:@=,-]*$")
_BY_HASH = re.compile(r"/by-hash/(SHA256|SHA512)/([0-9a-f]{64}|[0-9a-f]{128})$")
_POOL = re.compile(r"/pool/.+\.(deb|udeb|dsc|tar\.(gz|xz|bz2|zst)|diff\.gz)$")
_RELEASE = re.compile(r"/dists/[^/]+(/[^/]+)?/(InRelease|Release|Release\.gpg)$")
_INDEX = re.compile(
    r"/dists/.+/(Packages|Sources|Translation-[A-Za-z_]+|Contents-[a-z0-9-]+|Components-[a-z0-9-]+\.yml)"
    r"(\.(gz|xz|bz2|lzma|lz4|zst))?$"
)


@dataclass(frozen=True)
class Rule:
    """How to keep one answer: `ttl_s` None is for good; `expected` is the digest the body must have."""

    ttl_s: float | None
    expected: Expected | None = None


def plain_path(path: str) -> bool:
    """Whether `path` is `/seg/seg/...` with unreserved characters only (a dot may not start a segment)."""
    if not path.startswith("/") or len(path) > 2048:
        return False
    segments = path[1:].split("/")
    return all(_SEGMENT.match(segment) for segment in segments)


def archive_rule(path: str, index_ttl_s: float) -> Rule | None:
    """The rule of a Debian/Ubuntu archive path, or None when it is not cached."""
    if not plain_path(path):
        return None
    if match := _BY_HASH.search(path):
        expected = Expected.from_hex(match.group(1), match.group(2))
        if expected is not None and len(expected.digest) == (32 if match.group(1) == "SHA256" else 64):
            return Rule(None, expected)
        return None
    if _POOL.search(path):
        return Rule(None)
    if _RELEASE.search(path) or _INDEX.search(path):
        return Rule(index_ttl_s)
    return None
