"""One sandbox's egress proxy: HTTP/1.1 forward proxying, CONNECT tunnels and the mirror routes, on a unix socket.

Every request is checked against the proxy's current policy (switched by the host between phases; open
connections are cut at a switch). A refusal is answered 403 with a body naming the host and the phase; an allowed
upstream that cannot be reached is answered 502 or 504. Both are counted per (phase, host) and written to the
proxy's log (ledger.py). Plain-HTTP archive files and the mirror routes go through the shared cache; everything
else is streamed through uncached. Nothing of the host is added to a request: no credentials, no proxy
variables; hop-by-hop headers and Proxy-Authorization are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import BinaryIO

from agentbake.egress.allowlist import Policy
from agentbake.egress.cache import Entry
from agentbake.egress.fill import FILL_HEADERS, Answer, Pass, Shared, answer_headers, fill
from agentbake.egress.http1 import (
    CHUNK,
    Headers,
    HttpError,
    Request,
    UpstreamFailure,
    encode_head,
    end_to_end,
    header,
    parse_request,
    read_head,
    request_body_length,
    response_framing,
    within,
)
from agentbake.egress.ledger import Failure, Ledger, Refusal
from agentbake.egress.mirrors import Mirrors, Render
from agentbake.egress.rules import Rule, archive_rule
from agentbake.egress.upstream import Refused, Target, Upstream, connect, parse_authority, parse_url, request

_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_PRIVATE_REQUEST = frozenset({"authorization", "cookie", "range", "if-range"})
# Never forwarded: the Host is the URL's, and the whole body is already read (no 100 Continue to relay).
_DROP_REQUEST = frozenset({"host", "expect"})


@dataclass(frozen=True)
class ProxyStats:
    hits: int
    """Answers served from the cache (a client that joined another's fill is not counted)."""
    bytes_moved: int
    """Bytes moved both ways in the current phase (the budget `max_phase_bytes` bounds)."""


class _Client:
    """One client connection: its streams, whether its current answer has begun, its tunnel's upstream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.started = False
        self.tunnel: asyncio.StreamWriter | None = None

    def cut(self) -> None:
        self.writer.close()
        if self.tunnel is not None:
            self.tunnel.close()


class EgressProxy:
    """Serve one sandbox on `socket_path` under `policy` (see the module docstring). Runs in one event loop."""

    def __init__(self, shared: Shared, socket_path: Path, policy: Policy, *, log_path: Path | None = None) -> None:
        self.shared = shared
        self.config = shared.config
        self.socket_path = socket_path
        self.policy = policy
        self._refused = Ledger("refusal", self.config.max_logged_refusals, log_path)
        self._failed = Ledger("failure", self.config.max_logged_refusals, log_path)
        self._spent = 0
        self.hits = 0
        self._tasks: dict[asyncio.Task[None], _Client] = {}
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.socket_path), limit=self.config.max_head_bytes
        )
        os.chmod(self.socket_path, 0o666)  # the sandbox's root reaches it through a read-only bind mount

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks.items())
        for task, client in tasks:
            client.cut()
            task.cancel()
        await asyncio.gather(*(task for task, _ in tasks), return_exceptions=True)
        self.socket_path.unlink(missing_ok=True)

    def set_policy(self, policy: Policy) -> None:
        """Switch phase: later requests are checked against `policy`; open connections are cut, and the byte
        budget starts again."""
        self.policy = policy
        self._spent = 0
        for task, client in list(self._tasks.items()):
            client.cut()
            task.cancel()

    def stats(self) -> ProxyStats:
        return ProxyStats(self.hits, self._spent)

    def refusals(self) -> list[Refusal]:
        return [Refusal(*counted) for counted in self._refused.counts()]

    def failures(self) -> list[Failure]:
        return [Failure(*counted) for counted in self._failed.counts()]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.config.max_connections:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        client = self._tasks[task] = _Client(reader, writer)
        try:
            while await self._one(client):
                client.started = False
        except (ConnectionError, asyncio.CancelledError, TimeoutError):
            pass
        finally:
            self._tasks.pop(task, None)
            writer.close()

    async def _one(self, client: _Client) -> bool:
        """Serve one request; whether the connection stays open for another."""
        try:
            head = await read_head(client.reader, self.config.idle_timeout_s)
            if head is None:
                return False
            req = parse_request(head, self.config.max_headers)
        except HttpError as exc:
            await self._answer(client, "GET", exc.status, f"agentbake egress: {exc}\n", keep=False)
            return False
        keep = _keep_alive(req)
        try:
            body = b"" if req.method == "CONNECT" else await self._body(client, req)
            if self._spent > self.config.max_phase_bytes:
                raise Refused("(every host)", f"this phase moved more than {self.config.max_phase_bytes} bytes")
            if req.method == "CONNECT":
                await self._tunnel(client, req)
                return False
            return await self._dispatch(client, req, body, keep)
        except Refused as exc:
            self._refused.record(self.policy.phase, exc.host, exc.reason)
            body = f"agentbake egress: {exc.host} refused in the {self.policy.phase} phase: {exc.reason}\n"
            await self._answer(client, req.method, 403, body, keep=keep and req.method != "CONNECT")
            return keep and req.method != "CONNECT"
        except HttpError as exc:
            if isinstance(exc, UpstreamFailure):
                self._failed.record(self.policy.phase, exc.host, exc.reason)
            if not client.started:
                await self._answer(client, req.method, exc.status, f"agentbake egress: {exc}\n", keep=False)
            return False
        except (ssl.SSLError, OSError) as exc:
            if isinstance(exc, ConnectionError):
                raise
            if not client.started:  # e.g. the cache's disk is full: the client is told, the proxy carries on
                await self._answer(client, req.method, 502, f"agentbake egress: {exc}\n", keep=False)
            return False

    async def _body(self, client: _Client, req: Request) -> bytes:
        length = request_body_length(req, self.config.max_request_body_bytes)
        try:
            return await within(client.reader.readexactly(length), self.config.idle_timeout_s)
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            raise HttpError(400, "the request body did not arrive") from exc

    async def _dispatch(self, client: _Client, req: Request, body: bytes, keep: bool) -> bool:
        if req.target.startswith("/"):
            if not Mirrors.handles(req.target):
                raise HttpError(404, "this proxy serves absolute http:// URLs, CONNECT, and /pypi/ and /npm/ mirrors")
            return await self._mirror(client, req, req.target, body, keep)
        if req.target.startswith("https://"):
            raise HttpError(400, "https URLs go through CONNECT (set https_proxy), not as a proxied GET")
        target = parse_url(req.target)
        if target.host in _LOOPBACK_NAMES and Mirrors.handles(target.path):
            return await self._mirror(client, req, target.path, body, keep)
        headers = end_to_end(req.headers, drop=_DROP_REQUEST)
        if req.method in ("GET", "HEAD") and not body and not any(k.lower() in _PRIVATE_REQUEST for k, _ in headers):
            rule = archive_rule(target.path, self.config.index_ttl_s)
            if rule is not None:
                return await self._cached(client, req, f"GET {target.url}", target, rule, None, None, keep)
        return await self._relay(client, req, await self._upstream(target, req.method, headers, body), keep)

    async def _mirror(self, client: _Client, req: Request, path: str, body: bytes, keep: bool) -> bool:
        fetch = self.shared.mirrors.route(req.method, path, req.headers)
        for host in fetch.hosts:
            if (reason := self.policy.check_host(host)) is not None:
                raise Refused(host, reason)
        if fetch.key is not None and fetch.rule is not None:
            return await self._cached(
                client, req, fetch.key, fetch.upstream, fetch.rule, fetch.accept, fetch.render, keep
            )
        headers = end_to_end(req.headers, drop=_DROP_REQUEST)
        return await self._relay(client, req, await self._upstream(fetch.upstream, req.method, headers, body), keep)

    async def _upstream(self, target: Target, method: str, headers: Headers, body: bytes) -> Upstream:
        self._spent += len(body)
        return await request(
            target,
            method,
            headers,
            body,
            self.policy,
            tls=self.shared.tls,
            timeout=self.config.upstream_timeout_s,
            limit=self.config.max_head_bytes,
            max_headers=self.config.max_headers,
        )

    async def _cached(
        self,
        client: _Client,
        req: Request,
        key: str,
        target: Target,
        rule: Rule,
        accept: str | None,
        render: Render | None,
        keep: bool,
    ) -> bool:
        if (reason := self.policy.check_host(target.host)) is not None:
            raise Refused(target.host, reason)
        cache = self.shared.cache
        hit = cache.open(key)
        state = "hit"
        if hit is not None:
            self.hits += 1
        else:
            policy = self.policy
            result = await cache.single_flight(key, lambda: fill(self.shared, key, target, rule, accept, policy))
            if isinstance(result, Answer):
                return await self._answer_upstream(client, req, result, keep)
            if isinstance(result, Pass):
                up = result.claim()
                if up is None:
                    headers = [(k, v) for k, v in FILL_HEADERS if k != "Accept-Encoding"]
                    up = await self._upstream(target, "GET", headers, b"")
                return await self._relay(client, req, up, keep)
            hit = cache.open(key)
            state = "fill"
            if hit is None:
                raise HttpError(502, "the cached answer was evicted before it could be served")
        entry, blob = hit
        with blob:
            if render is not None:
                if entry.size > self.config.max_index_bytes:
                    raise HttpError(502, f"the index at {target.url} is over {self.config.max_index_bytes} bytes")
                data, content_type = render(blob.read())
                await self._send_whole(client, req, 200, [("Content-Type", content_type)], data, keep, state)
            else:
                await self._send_blob(client, req, entry, blob, keep, state)
        return keep

    async def _send(self, client: _Client, data: bytes) -> None:
        client.started = True
        self._spent += len(data)
        client.writer.write(data)
        await within(client.writer.drain(), self.config.idle_timeout_s)

    async def _answer(self, client: _Client, method: str, status: int, text: str, *, keep: bool) -> None:
        body = text.encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        headers.append(("Connection", "keep-alive" if keep else "close"))
        with contextlib.suppress(ConnectionError, TimeoutError):
            await self._send(client, _status_line(status, headers) + (b"" if method == "HEAD" else body))

    async def _answer_upstream(self, client: _Client, req: Request, answer: Answer, keep: bool) -> bool:
        await self._send_whole(client, req, answer.status, answer.headers, answer.body, keep, "pass")
        return keep

    async def _send_whole(
        self, client: _Client, req: Request, status: int, headers: Headers, body: bytes, keep: bool, state: str
    ) -> None:
        sent = [*headers, ("Content-Length", str(len(body))), ("X-Agentbake-Cache", state)]
        sent.append(("Connection", "keep-alive" if keep else "close"))
        await self._send(client, _status_line(status, sent) + (b"" if req.method == "HEAD" else body))

    async def _send_blob(
        self, client: _Client, req: Request, entry: Entry, blob: BinaryIO, keep: bool, state: str
    ) -> None:
        headers = [("Content-Type", entry.content_type), *entry.headers.items(), ("Content-Length", str(entry.size))]
        headers += [("X-Agentbake-Cache", state), ("Connection", "keep-alive" if keep else "close")]
        await self._send(client, _status_line(200, headers))
        if req.method != "HEAD":
            while data := blob.read(CHUNK):
                await self._send(client, data)

    async def _relay(self, client: _Client, req: Request, up: Upstream, keep: bool) -> bool:
        """Stream an upstream answer to the client, reframed for it."""
        try:
            response = up.response
            kind, _ = response_framing(response, req.method)
            chunked = kind == "chunked" and req.version == "HTTP/1.1"
            keep = keep and kind != "close" and (kind != "chunked" or chunked)
            headers = answer_headers(response.headers, keep_length=True)
            if chunked:
                headers.append(("Transfer-Encoding", "chunked"))
            headers.append(("Connection", "keep-alive" if keep else "close"))
            await self._send(client, _status_line(response.status, headers, response.reason))
            async for data in up.body:
                await self._send(client, b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            if chunked:
                await self._send(client, b"0\r\n\r\n")
            return keep
        finally:
            await up.close()

    async def _tunnel(self, client: _Client, req: Request) -> None:
        host, port = parse_authority(req.target)
        reader, writer = await connect(
            host, port, self.policy, tls=None, timeout=self.config.upstream_timeout_s, limit=self.config.max_head_bytes
        )
        client.tunnel = writer
        try:
            await self._send(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
            last = [time.monotonic()]
            await asyncio.gather(self._pipe(client.reader, writer, last), self._pipe(reader, client.writer, last))
        finally:
            writer.close()

    async def _pipe(self, source: asyncio.StreamReader, target: asyncio.StreamWriter, last: list[float]) -> None:
        """Copy until EOF; silence is measured over both directions, so a long download is not cut."""
        idle = self.config.idle_timeout_s
        try:
            while True:
                try:
                    data = await within(source.read(CHUNK), idle)
                except TimeoutError:
                    if time.monotonic() - last[0] >= idle:
                        break
                    continue
                if not data:
                    break
                last[0] = time.monotonic()
                self._spent += len(data)
                if self._spent > self.config.max_phase_bytes:
                    break
                target.write(data)
                await within(target.drain(), idle)
            if target.can_write_eof():
                target.write_eof()
        except (ConnectionError, TimeoutError, OSError):
            target.close()


def _keep_alive(req: Request) -> bool:
    connection = (header(req.headers, "connection") or "").lower()
    if req.version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection


def _status_line(status: int, headers: Headers, reason: str | None = None) -> bytes:
    try:
        phrase = reason or HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return encode_head(f"HTTP/1.1 {status} {phrase}", headers)
