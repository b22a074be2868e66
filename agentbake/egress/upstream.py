"""Reaching an upstream for a sandbox: resolve on the host, connect only to an allowed address, send one request.

Upstream TLS verifies against the host's CA bundle, so a corporate CA works. The host's proxy variables are never
used.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from agentbake.egress.allowlist import IPAddress, Policy, normalize_name, parse_address
from agentbake.egress.http1 import (
    CLOSED,
    Headers,
    HttpError,
    Response,
    UpstreamFailure,
    encode_head,
    iter_body,
    no_answer,
    parse_response,
    read_head,
    response_framing,
    within,
)

DEFAULT_PORTS = {"http": 80, "https": 443}


class Refused(Exception):
    """The policy refuses this host or every address it resolves to; `host` is what the client asked for."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(reason)
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """An upstream URL, split: `host` is a normalized name or an address without brackets."""

    scheme: str
    host: str
    port: int
    path: str
    """Path and query as the client sent them (the cache decides separately whether such a path is cacheable)."""

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


def parse_url(url: str, *, schemes: tuple[str, ...] = ("http",)) -> Target:
    """An absolute-form request target (or an upstream base URL): no user info, a known scheme."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HttpError(400, f"malformed URL {url[:200]!r}") from exc
    if parts.scheme not in schemes or not parts.hostname or "@" in parts.netloc:
        raise HttpError(400, f"expected an absolute {' or '.join(schemes)} URL without credentials, got {url[:200]!r}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(parts.scheme, _host(parts.hostname), port or DEFAULT_PORTS[parts.scheme], path)


def parse_authority(text: str) -> tuple[str, int]:
    """CONNECT's `host:port` (an IPv6 literal in brackets)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise HttpError(400, f"CONNECT needs host:port, got {text[:200]!r}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise HttpError(400, f"an IPv6 address in CONNECT needs brackets, got {text[:200]!r}")
    return _host(host), int(port)


def _host(host: str) -> str:
    address = parse_address(host)
    return str(address) if address is not None else normalize_name(host)


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verifying client context: the system's roots plus `ca_file` when given."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return context


async def _addresses(host: str, port: int, timeout: float) -> list[IPAddress]:
    literal = parse_address(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await within(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    except (OSError, TimeoutError) as exc:
        raise UpstreamFailure(
            502, f"cannot resolve {host}: {exc or 'timed out'}", host, "name did not resolve"
        ) from exc
    found: list[IPAddress] = []
    for info in infos:
        address = parse_address(str(info[4][0]))
        if address is not None and address not in found:
            found.append(address)
    return found


async def connect(
    host: str,
    port: int,
    policy: Policy,
    *,
    tls: ssl.SSLContext | None,
    timeout: float,
    limit: int,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to `host:port` through an address the policy allows; Refused, or UpstreamFailure(502)."""
    reason = policy.check_host(host)
    if reason is not None:
        raise Refused(host, reason)
    addresses = await _addresses(host, port, timeout)
    allowed = [address for address in addresses if policy.check_address(address) is None]
    if not allowed:
        refusal = policy.check_address(addresses[0]) if addresses else "it has no address"
        raise Refused(host, f"{host} resolves to {addresses[0] if addresses else 'nothing'}: {refusal}")
    failure: Exception | None = None
    for address in allowed:
        try:
            return await within(
                asyncio.open_connection(
                    str(address), port, ssl=tls, server_hostname=host if tls else None, limit=limit
                ),
                timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            failure = exc
    raise UpstreamFailure(
        502, f"cannot connect to {host}:{port}: {failure or 'timed out'}", host, connect_failure(failure)
    )


def connect_failure(exc: Exception | None) -> str:
    """The short cause of a failed connect (what the proxy counts and logs)."""
    if isinstance(exc, ssl.SSLError):  # a subclass of OSError, as is a certificate's rejection
        return f"TLS handshake failed: {getattr(exc, 'verify_message', None) or exc.reason or exc}"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError) or exc is None:
        return "connect timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()  # "network is unreachable", "no route to host"
    return f"connect failed: {exc}"


@dataclass
class Upstream:
    """One upstream answer in flight: its head, its body (streamed once), and the connection to close."""

    response: Response
    body: AsyncIterator[bytes]
    writer: asyncio.StreamWriter

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def request(
    target: Target,
    method: str,
    headers: Headers,
    body: bytes,
    policy: Policy,
    *,
    tls: ssl.SSLContext | None,
    timeout: float,
    limit: int,
    max_headers: int,
) -> Upstream:
    """Send one request (`headers` already end-to-end; Host and `Connection: close` are added) and read the
    answer's head. The caller closes the Upstream."""
    host = target.host
    reader, writer = await connect(
        host, target.port, policy, tls=tls if target.scheme == "https" else None, timeout=timeout, limit=limit
    )
    try:
        framing = [("Content-Length", str(len(body)))] if body or method in ("POST", "PUT", "PATCH") else []
        sent = [("Host", target.authority), *headers, *framing, ("Connection", "close")]
        try:
            writer.write(encode_head(f"{method} {target.path} HTTP/1.1", sent) + body)
            await within(writer.drain(), timeout)
            head = await read_head(reader, timeout)
        except HttpError as exc:
            if exc.status == 408:
                raise UpstreamFailure(
                    504, f"{target.authority} sent no answer in time", host, no_answer(timeout)
                ) from exc
            if exc.status == 400:  # its head ended with the connection
                raise UpstreamFailure(502, f"{target.authority}: {exc} (its answer)", host, CLOSED) from exc
            raise HttpError(502, f"{target.authority}: {exc} (its answer)") from exc
        except TimeoutError as exc:  # it took no request
            raise UpstreamFailure(504, f"{target.authority} took no request in time", host, no_answer(timeout)) from exc
        except OSError as exc:
            raise UpstreamFailure(502, f"{target.authority} closed the connection: {exc}", host, CLOSED) from exc
        if head is None:
            raise UpstreamFailure(502, f"{target.authority} closed the connection without an answer", host, CLOSED)
        response = parse_response(head, max_headers)
        return Upstream(response, iter_body(reader, response_framing(response, method), timeout, host), writer)
    except BaseException:
        writer.close()
        raise
