"""A small pooled HTTP/1.1 client for the upstream, built on asyncio protocols and httptools.

It adds about 0.05 ms per request, where httpx adds about 0.85 ms (bench/gateway/README.md). It does only what the
gateway needs: keep-alive pools, streamed bodies, timeouts, and `HTTP(S)_PROXY` / `NO_PROXY`. Failures raise
`UpstreamError`s carrying the status a client should see.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import httptools

from agentbake.gateway.errors import UpstreamError, upstream_timeout, upstream_unavailable

_TIMED_OUT = object()


def upstream_broken(detail: str) -> UpstreamError:
    return UpstreamError(f"upstream connection failed: {detail}", status=502)


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: its address and the Proxy-Authorization header line its URL's credentials make."""

    host: str
    port: int
    authorization: bytes = b""

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def environment_proxies() -> dict[str, str]:
    """urllib's `getproxies()`; urllib.request (~4 ms of the gateway's start) is imported only when a
    `*_proxy` variable is set."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return {}
    import urllib.request

    return urllib.request.getproxies()


def proxy_for(scheme: str, host: str, port: int, proxies: dict[str, str]) -> Proxy | None:
    """The proxy `proxies` (from `environment_proxies`) names for this origin; None when there is none or `no`
    (NO_PROXY) lists the host, as urllib decides."""
    url = proxies.get(scheme)
    if not url:
        return None
    import urllib.request

    if urllib.request.proxy_bypass_environment(f"{host}:{port}", proxies):
        return None
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise upstream_unavailable(f"{scheme}_proxy {url!r}: only http://HOST:PORT proxies are supported")
    authorization = b""
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = b"proxy-authorization: Basic %s\r\n" % base64.b64encode(credentials)
    return Proxy(parts.hostname, parts.port or 80, authorization)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; httptools parses the response as bytes arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.complete = False
        self.received_any = False
        self.chunks: deque[bytes] = deque()
        self.error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._headers_done = False

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(upstream_broken(f"malformed HTTP response: {exc}"))
            self.transport.close()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done and exc is None and self._delimited_by_close():
            self.complete = True  # a body without length or chunking ends when the server closes
            self._wake()
        elif not self.complete:
            detail = f"{type(exc).__name__}: {exc}" if exc else "connection closed before the response ended"
            self._fail(upstream_broken(detail))

    def _delimited_by_close(self) -> bool:
        return "content-length" not in self.headers and "chunked" not in self.headers.get("transfer-encoding", "")

    # -- httptools callbacks (after an error they are ignored: the bytes belong to no request)

    def on_message_begin(self) -> None:
        if self.complete:
            # A second response to one request: the connection is out of step and never reused.
            self._fail(upstream_broken("data after the end of the response"))
            self.transport.close()  # type: ignore[union-attr]

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.error is None:
            self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self.error is not None:
            return
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.error is None:
            self.chunks.append(body)
            self._wake()

    def on_message_complete(self) -> None:
        if self.error is None:
            self.complete = True
            self._wake()

    # -- used by the client

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def reset(self) -> None:
        self.status = 0
        self.headers = {}
        self.complete = False
        self.received_any = False
        self._headers_done = False
        self.chunks.clear()

    async def wait(self, timeout: float, ready: str) -> None:
        """Wait until `ready` ("headers" or "body") holds, an error happens or `timeout` passes
        without a byte."""
        while not (self._headers_done if ready == "headers" else (self.chunks or self.complete)):
            if self.error is not None:
                raise self.error
            waiter = self._waiter = self.loop.create_future()
            timer = self.loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
            if waiter.result() is _TIMED_OUT:
                self.transport.close()  # type: ignore[union-attr]
                raise upstream_timeout(f"no data for {timeout:g} s")


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


class UpstreamResponse:
    """A response whose headers arrived; the body is read with `read` or `iter_raw`, then `close`."""

    def __init__(self, client: UpstreamClient, origin: tuple, conn: _Connection) -> None:
        self._client = client
        self._origin = origin
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self._released = False
        self._content: bytes | None = None

    async def iter_raw(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            await conn.wait(self._client.read_timeout, "body")
            while conn.chunks:
                yield conn.chunks.popleft()
            if conn.complete:
                return

    async def read(self) -> bytes:
        """The whole body (kept, so a second read gives it again)."""
        if self._content is None:
            self._content = b"".join([chunk async for chunk in self.iter_raw()])
        return self._content

    def close(self) -> None:
        """Give the connection back to the pool if its response ended cleanly, else drop it."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if conn.complete and conn.keep_alive and not conn.closed and conn.error is None:
            self._client._idle.setdefault(self._origin, []).append(conn)
        else:
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]
        self._client._slots.release()


class UpstreamClient:
    """Keep-alive connection pools per origin, at most `max_connections` requests in flight."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        ca_file: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        self._idle: dict[tuple, list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._ssl: ssl.SSLContext | None = None
        self._ca_file = ca_file
        self._proxies = environment_proxies()  # read once, when the gateway makes its client
        self._proxy: dict[tuple, Proxy | None] = {}

    def _target(self, url: str) -> tuple[tuple, bytes]:
        """((https, host, port), request target) for a path below base_url or an absolute URL.

        The target is the absolute URL when a plain-HTTP request goes through a proxy."""
        parts = urlsplit(url if "://" in url else self.base_url + url)
        https = parts.scheme == "https"
        origin = (https, parts.hostname or "127.0.0.1", parts.port or (443 if https else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not https and self._proxy_of(origin) is not None:
            target = f"http://{origin[1]}:{origin[2]}{target}"
        return origin, target.encode()

    def _proxy_of(self, origin: tuple) -> Proxy | None:
        if origin not in self._proxy:
            https, host, port = origin
            self._proxy[origin] = proxy_for("https" if https else "http", host, port, self._proxies)
        return self._proxy[origin]

    async def _connect(self, origin: tuple) -> _Connection:
        https, host, port = origin
        loop = asyncio.get_running_loop()
        if https and self._ssl is None:
            try:
                self._ssl = ssl.create_default_context(cafile=self._ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise upstream_unavailable(f"cannot load the upstream CA file {self._ca_file}: {exc}") from exc
        proxy = self._proxy_of(origin)
        via = f" through proxy {proxy}" if proxy else ""
        try:
            if proxy is None:
                connecting = loop.create_connection(
                    lambda: _Connection(loop), host, port, ssl=self._ssl if https else None
                )
            elif https:
                connecting = self._tunnel(loop, proxy, host, port)
            else:
                connecting = loop.create_connection(lambda: _Connection(loop), proxy.host, proxy.port)
            _, conn = await asyncio.wait_for(connecting, self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise upstream_unavailable(f"cannot connect to {host}:{port}{via}: {exc or type(exc).__name__}") from exc
        return conn

    async def _tunnel(
        self, loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int
    ) -> tuple[asyncio.BaseTransport, _Connection]:
        """A TLS connection to host:port inside a CONNECT tunnel through `proxy`."""
        family, kind, _, _, address = (await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM))[0]
        sock = socket.socket(family, kind)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            authority = f"{host}:{port}".encode()
            await loop.sock_sendall(
                sock, b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (authority, authority, proxy.authorization)
            )
            answer = b""
            while b"\r\n\r\n" not in answer:
                data = await loop.sock_recv(sock, 4096)
                if not data or len(answer) > 65536:
                    raise ConnectionError("the proxy closed the connection during CONNECT")
                answer += data
            status = answer.split(b"\r\n", 1)[0].decode("latin-1")
            if status.split(" ")[1:2] != ["200"]:
                raise ConnectionError(f"the proxy answered CONNECT with {status!r}")
            return await loop.create_connection(
                lambda: _Connection(loop), sock=sock, ssl=self._ssl, server_hostname=host
            )
        except BaseException:
            sock.close()
            raise

    async def request(self, method: str, url: str, body: bytes = b"") -> UpstreamResponse:
        """Send a request; returns once the response headers arrived."""
        origin, target = self._target(url)
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%scontent-length: %d\r\n\r\n" % (
            method.encode(),
            target,
            origin[1].encode(),
            self._headers,
            len(body),
        )
        if self._slots.locked():  # wait_for costs a task; only pay for it when the pool is full
            try:
                await asyncio.wait_for(self._slots.acquire(), self.connect_timeout)
            except TimeoutError:
                raise upstream_unavailable("all upstream connections are busy") from None
        else:
            await self._slots.acquire()
        try:
            idle = self._idle.get(origin)
            while idle:
                conn = idle.pop()
                if conn.closed:
                    continue
                try:
                    return await self._send(origin, conn, head + body)
                except UpstreamError as error:
                    # The server may close an idle keep-alive connection just as it is reused; such a
                    # request got no answer at all and is safe to send again on a new connection.
                    if conn.received_any or error.status != 502:
                        raise
            return await self._send(origin, await self._connect(origin), head + body)
        except BaseException:
            self._slots.release()
            raise

    async def _send(self, origin: tuple, conn: _Connection, payload: bytes) -> UpstreamResponse:
        conn.reset()
        conn.transport.write(payload)  # type: ignore[union-attr]
        try:
            await conn.wait(self.read_timeout, "headers")
        except BaseException:
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]
            raise
        return UpstreamResponse(self, origin, conn)

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.transport.close()  # type: ignore[union-attr]
        self._idle.clear()
