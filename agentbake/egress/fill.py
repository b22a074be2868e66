"""Filling the cache for a client: one upstream fetch, kept only when whole, cacheable and matching its digest."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass

from agentbake.egress.allowlist import Policy
from agentbake.egress.cache import Cache, DigestMismatch, Entry
from agentbake.egress.config import EgressConfig
from agentbake.egress.http1 import Headers, HttpError, Response, content_length, end_to_end, header, response_framing
from agentbake.egress.mirrors import Mirrors
from agentbake.egress.rules import Rule
from agentbake.egress.upstream import Target, Upstream, request

FILL_HEADERS: Headers = [("Accept-Encoding", "identity"), ("User-Agent", "agentbake-egress")]
_SMALL_ANSWER = 1024 * 1024


@dataclass
class Shared:
    """What the proxies of one service share: settings, the cache, the mirror routes, upstream TLS."""

    config: EgressConfig
    cache: Cache
    mirrors: Mirrors
    tls: ssl.SSLContext


@dataclass(frozen=True)
class Answer:
    """A small complete answer: an upstream's error, or the proxy's own."""

    status: int
    headers: Headers
    body: bytes


class Pass:
    """A fill's verdict that the answer is not cacheable. The first client to claim it relays the upstream answer
    already open; any other client fetches its own. One nobody claims is closed after a while."""

    def __init__(self, up: Upstream | None = None, *, unclaimed_s: float = 0.0) -> None:
        self._up = up
        if up is not None:
            asyncio.get_running_loop().call_later(unclaimed_s, self._expire)

    def claim(self) -> Upstream | None:
        up, self._up = self._up, None
        return up

    def _expire(self) -> None:
        if (up := self.claim()) is not None:
            up.writer.close()


async def fill(
    shared: Shared, key: str, target: Target, rule: Rule, accept: str | None, policy: Policy
) -> Entry | Answer | Pass:
    """Fetch `target` for the cache with the proxy's own headers. Keep it when it is a whole, keepable 200 matching its
    published digest; else return an Answer to pass on, or a Pass."""
    headers = [*FILL_HEADERS, *([("Accept", accept)] if accept else [])]
    config = shared.config
    up = await request(
        target,
        "GET",
        headers,
        b"",
        policy,
        tls=shared.tls,
        timeout=config.upstream_timeout_s,
        limit=config.max_head_bytes,
        max_headers=config.max_headers,
    )
    handed_over = False
    try:
        response = up.response
        if response.status != 200:
            return Answer(response.status, answer_headers(response.headers), await small_body(up))
        if not _keepable(response, rule, config.max_cached_object_bytes):
            handed_over = True
            return Pass(up, unclaimed_s=config.upstream_timeout_s)
        writer = shared.cache.writer(rule.expected)
        try:
            async for data in up.body:
                writer.write(data)
                if writer.size > config.max_cached_object_bytes:
                    writer.abort()
                    return Pass()
        except BaseException:
            writer.abort()
            raise
        kept = {k: v for k in ("Last-Modified", "ETag") if (v := header(response.headers, k)) is not None}
        content_type = header(response.headers, "content-type") or "application/octet-stream"
        try:
            return shared.cache.commit(key, writer, content_type=content_type, ttl_s=rule.ttl_s, headers=kept)
        except DigestMismatch as exc:
            message = f"agentbake egress: {target.url} does not match its published digest ({exc}); not served\n"
            return Answer(502, [("Content-Type", "text/plain")], message.encode())
    finally:
        if not handed_over:
            await up.close()


def _keepable(response: Response, rule: Rule, max_bytes: int) -> bool:
    """Whether a 200's head allows keeping its body: whole, unencoded, not partial, not personal, not too large."""
    control = (header(response.headers, "cache-control") or "").lower()
    length = content_length(response.headers)
    return not (
        (response_framing(response, "GET")[0] == "close" and rule.expected is None)
        or (header(response.headers, "content-encoding") or "identity").lower() != "identity"
        or header(response.headers, "content-range") is not None
        or header(response.headers, "set-cookie") is not None
        or "no-store" in control
        or "private" in control
        or (length is not None and length > max_bytes)
    )


def answer_headers(headers: Headers, *, keep_length: bool = False) -> Headers:
    drop = frozenset() if keep_length else frozenset({"content-length"})
    return end_to_end(headers, drop=drop)


async def small_body(up: Upstream) -> bytes:
    """An error answer's body, up to a bound (cut there: it is only shown, never cached)."""
    data = b""
    with contextlib.suppress(HttpError):
        async for chunk in up.body:
            data += chunk
            if len(data) >= _SMALL_ANSWER:
                break
    return data[:_SMALL_ANSWER]
